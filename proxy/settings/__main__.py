"""`python -m proxy.settings > config.example.toml`: the example config, generated."""

from proxy.settings import example_toml

print(example_toml(), end="")
