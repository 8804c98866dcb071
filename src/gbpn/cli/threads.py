"""Whether ``--threads`` asks for more CPU threads than the machine has free: threads beyond the free cores wait on
each other (a 60-epoch run took 45-52 s with one thread and 176-181 s with two, at load 5 on 2 cores)."""
from __future__ import annotations

import math
import os
from typing import Optional


def busy_note(threads: int, cpus: int) -> Optional[str]:
    """One line when ``threads`` is more than the CPUs free of other work (``cpus`` less the last minute's load
    average, at least 1), else None; None too where the system gives no load average."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return None
    free = max(1, min(cpus, math.floor(cpus - load + 0.5)))
    if threads <= free:
        return None
    return (f"--threads {threads}: the load average is {load:.1f} on {cpus} CPU(s), so about {free} {'is' if free == 1 else 'are'} free; threads "
            f"beyond the free cores wait on each other and can make the run several times slower than --threads "
            f"{free} (docs/usage.md)")
