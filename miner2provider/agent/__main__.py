"""python -m miner2provider.agent --config /etc/m2p/agent.json"""

import sys

from miner2provider.agent.loop import main

sys.exit(main())
