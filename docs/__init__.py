"""The project's documentation pages, shipped in the wheel as the package ``flowmaker_docs`` (setup.py) so that
help text can point to an installed copy (``flowmaker.entry.doc``). A regular package, not a namespace
one: ``importlib.resources.files`` of an editable install's namespace package fails."""
