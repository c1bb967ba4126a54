"""Deploy plans on a backend and replay request traces (the ``sim`` backend: a discrete-event
cluster simulator with iteration-level continuous batching). See docs/harness.md."""
