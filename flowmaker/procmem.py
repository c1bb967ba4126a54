"""This process's resident memory from Linux's ``/proc/self`` (standard library only, so the GPU
check, which has PyTorch alone, uses it too): the current and peak resident set, and a reset of
the peak so that a measurement starts from what is resident now."""
from __future__ import annotations


def status_bytes(field: str) -> int | None:
    """A memory field of ``/proc/self/status`` (``VmRSS``, ``VmHWM``: the peak), bytes; None where
    there is no such file or field."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024          # kB
    except (OSError, ValueError, IndexError):
        return None
    return None


def reset_peak_rss() -> bool:
    """Set the peak (``VmHWM``) back to the current resident set (``clear_refs`` 5); False where
    the kernel does not allow it."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
            fh.write("5")
        return True
    except OSError:
        return False
