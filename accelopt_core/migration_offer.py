"""What the editor is offered when a legacy kernel migrates: plain data, apart from migrate.py, so that the
language server can receive it from its worker without loading libcst (a reply is unpickled where its class
lives)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MigrationOffer:
    """A migration the editor offers as one code action: the text it replaces, the migrated text, and what the
    run of both versions on the same fresh seeds showed (for the action's title)."""

    base_source: str
    source: str
    complete: bool
    agree: bool
    needs_person: tuple[tuple[int, str], ...]
    original_ms: float | None
    migrated_ms: float | None
    measured_on: str

    @property
    def title(self) -> str:
        """"Migrate to NKI 0.8 — both correct on the same seeds, 0.0137 -> 0.0137 ms (simulated trn2)", or what
        is still wrong with it."""
        if not self.agree:
            verdict = "the migrated kernel does not pass its check"
        elif self.complete:
            verdict = "both correct on the same seeds"
        else:
            left = len(self.needs_person)
            verdict = f"both correct, {left} line{'s' * (left != 1)} left for a person"
        times = (f", {self.original_ms:.4g} -> {self.migrated_ms:.4g} ms ({self.measured_on})"
                 if self.original_ms is not None and self.migrated_ms is not None else "")
        return f"Migrate to NKI 0.8 — {verdict}{times}"
