"""The job itself: values schema and defaults, the description builder, the importer, and the
one admission rule set every check runs on the rendered PyTorchJob."""
