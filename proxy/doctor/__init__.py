"""`recap-proxy doctor`: the setup checked, one line per check (`checks`; `net`: the
checks that ask over the network)."""
