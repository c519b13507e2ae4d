"""pytorchjob-kit generator: job descriptions to validated chart values, manifests and runs."""

# Who owns the fields the tool server-side applies, on a user's cluster and on the local one.
FIELD_MANAGER = "pytorchjob-kit"
