"""The sandbox harness's own tests (sandbox/: its stand-ins and its pure parts), apart from the product's
unit tests, which need no harness but the STAND-IN servers they name."""
