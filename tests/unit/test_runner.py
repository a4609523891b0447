"""fleet/runner.py's choice of Ansible strategy: Mitogen's by default, Ansible's own one setting away."""

from pathlib import Path

import pytest

from miner2provider.core.errors import UsageError
from miner2provider.fleet.runner import STRATEGY_ENV, strategy_settings


def test_mitogens_strategy_is_the_default_and_its_plugin_is_the_installed_ones():
    settings = strategy_settings("")
    assert settings["ANSIBLE_STRATEGY"] == "mitogen_linear"
    assert (Path(settings["ANSIBLE_STRATEGY_PLUGINS"]) / "mitogen_linear.py").is_file(), settings
    assert strategy_settings(" mitogen_linear ") == settings


def test_ansibles_own_strategy_is_one_setting_away():
    assert strategy_settings("linear") == {"ANSIBLE_STRATEGY": "linear"}


def test_an_unknown_strategy_is_named_with_the_setting_and_the_choices():
    with pytest.raises(UsageError, match=rf"{STRATEGY_ENV}='free': say one of mitogen_linear, linear"):
        strategy_settings("free")
