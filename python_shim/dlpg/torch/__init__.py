"""`import dlpg.torch` registers the torch.distributed backend "dlpg" (cpu and cuda), so

    torch.distributed.init_process_group("dlpg", ...)

and torchrun work unchanged. Version differences between torch 1.13 and 2.x live in
dlpg.torch._compat.
"""

from . import _compat
from .process_group import ProcessGroupDlpg
from .work import DlpgWork

BACKEND_NAME = "dlpg"


def create_process_group(store, rank, size, timeout):
    """The creator torch calls with its (prefix) store, group rank, size and timeout."""
    return ProcessGroupDlpg(store, rank, size, timeout)


def register():
    """Register the backend (idempotent); returns True when this call registered it."""
    return _compat.register(BACKEND_NAME, create_process_group)


register()

__all__ = ["ProcessGroupDlpg", "DlpgWork", "create_process_group", "register", "BACKEND_NAME"]
