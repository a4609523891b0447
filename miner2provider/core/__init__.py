"""The ground every stage stands on: one error hierarchy (exit codes), the inventory and its settings
contract, the installed collection, text-file helpers and value checks.  Imports no other stage."""
