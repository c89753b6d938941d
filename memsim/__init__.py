"""memsim."""
