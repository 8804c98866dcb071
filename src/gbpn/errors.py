"""User-facing errors: the CLI turns these into a one-line message and a non-zero exit."""


class GBPNError(Exception):
    """Something the user can fix (bad input, missing files, corrupt checkpoint)."""


class DatasetNotFoundError(GBPNError):
    """A dataset's files are not in the data directory and could not be downloaded."""


class ModelInputError(GBPNError, ValueError):
    """A model given a tensor or a hyper-parameter it cannot take (a ``ValueError`` too, as the BP layer's
    own input checks raise)."""
