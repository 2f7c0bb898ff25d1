"""Running code that a model wrote: hostile until proven otherwise, so only ever in a limited child process.
`python` runs a program (the `code` environment's tests); `sqlite` runs one read-only query (the `sql` environment,
and the gold queries when a data set is prepared). A ground-floor room: it imports nothing from ttlearn."""
