"""``idp-proxy release``: a protected copy of a table by microaggregation and noise
(seed 002; docs/release.md). ``request`` checks the arguments before any budget is
spent, ``sql`` is what the backend runs, ``run`` moves the data between them."""
