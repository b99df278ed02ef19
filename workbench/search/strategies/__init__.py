"""The built-in search strategies, one module each; every module registers one `Strategy`
(`workbench.search.registry`), and the registry imports them all on first use. A new strategy
is a new module here (or anywhere, registered the same way) plus its test.
"""
