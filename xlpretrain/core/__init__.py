"""What every layer and every program shares, importing nothing else of ours: the errors
(and how to install an optional package), how a command line ends, and a program's quiet start.
"""
