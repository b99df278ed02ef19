"""The built-in screening methods, one module each; every module registers one
`ScreenMethod` (`workbench.screening.registry`), and the registry imports them all on first
use. A new method is a new module here (or anywhere, registered the same way) plus its test.
"""
