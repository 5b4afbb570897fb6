"""The core layer: the domain's types and facts, importing nothing else of the project.

Every other layer may read it; a module here that needed the store or an arm would make
the campaign file depend on a database or a server, which it must not.
"""
