"""The pure core: decisions as functions over models, with no I/O, clocks or network.

Handlers in `proxy.web` gather inputs, call into here, and carry out the result.
"""
