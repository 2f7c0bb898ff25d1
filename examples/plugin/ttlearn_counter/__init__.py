"""An out-of-tree ttlearn plug-in (docs/plugins.md): the `counter` environment, the `tally` memory and the `first`
LLM back end, found by ttlearn through this package's entry points."""
