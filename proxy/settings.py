"""Per-session settings: ``SET idp.* = ...``, ``RESET``, ``SHOW`` and the ε hint.

SPEC §3.2: settings follow PostgreSQL's custom-GUC style. Settings of ordinary
PostgreSQL clients (``extra_float_digits``, ``application_name``...) are remembered and
echoed by SHOW, but change nothing about privacy.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from decimal import Decimal

from sqlglot import exp

from proxy.accounting import GAUSSIAN, LAPLACE, NOISES
from proxy.errors import BadSetting, NotSupported, ReadOnly
from proxy.loss import parse_epsilon
from proxy.rules import MODELS, Rules
from proxy.vocabulary import PriorSpec, parse_prior
from proxy.zones import UTC, session_zone

SENSITIVITIES = ("local", "global", "smooth", "instance", "piecewise")
# Percentiles, MAX and MIN are drawn by the exponential mechanism (the best DP option
# measured: benchmarks/README.md, utility) under both models; other aggregates take
# the global sensitivity. Raw iDP ("local") is the owner's opt-in ([defaults]
# noise_scale = "local"), and then iDP's default: its noise's scale is a function of
# the data (docs/threat-model.md).
# each model's sensitivities, its default first
FITS = {"idp": ("instance", "piecewise"), "dp": ("instance", "piecewise", "global", "smooth")}
DEFAULT_GAMMA = 3.0  # seed 000 found γ = 3 best for the median
_HINT = re.compile(r"^\+\s*(.*)$", re.DOTALL)
_TIME_ZONE = re.compile(r"(?:SESSION\s+|(LOCAL)\s+)?TIME\s+ZONE\s+(\S+)", re.IGNORECASE)


@dataclass(frozen=True)
class Settings:
    epsilon: Decimal | None = None
    model: str | None = None
    sensitivity: str | None = None
    intervals: bool = False  # add <col>_ci95_low/high columns for tools without notices
    prior: PriorSpec | None = None  # answer by knowledge refinement (seed 001)
    gamma: float | None = None  # tail of the smooth-sensitivity noise, 1/(1 + |z|^γ)
    noise: str | None = None  # of COUNT, SUM and AVG under DP: 'laplace' or 'gaussian'
    # PostgreSQL's TimeZone: the zone times are read in (proxy.zones; an IANA name)
    time_zone: str = UTC
    other: tuple[tuple[str, str], ...] = field(default_factory=tuple)

    def resolve_model(self, rules: Rules) -> str:
        model = self.model or rules.defaults.model
        sensitivity = self.sensitivity or default_sensitivity(model, rules)
        fits = _fits(model, rules)
        if sensitivity not in fits:
            if sensitivity == "local" and model == "idp":
                raise BadSetting("idp.sensitivity = 'local' (noise scaled to the data's own "
                                 "local sensitivity) is the data owner's opt-in, [defaults] "
                                 "noise_scale = \"local\" in the rules; use 'instance' or "
                                 "'piecewise'")
            raise BadSetting(
                f"idp.sensitivity = '{sensitivity}' does not fit idp.model = '{model}'; "
                f"use {_either(_fits('idp', rules))} with 'idp', and "
                f"{_either(_fits('dp', rules))} with 'dp'"
            )
        return model

    def resolve_sensitivity(self, rules: Rules) -> str:
        """The sensitivity in force: the one SET, else the model's default."""
        return self.sensitivity or default_sensitivity(self.resolve_model(rules), rules)

    def smooth_gamma(self, rules: Rules) -> float | None:
        """γ when the noise is calibrated to the smooth sensitivity, else None."""
        if self.resolve_sensitivity(rules) == "smooth":
            return self.gamma or DEFAULT_GAMMA
        return None

    def instance_mechanism(self, rules: Rules) -> bool:
        """Percentiles, MAX and MIN by the exponential mechanism over the domain's grid
        (DP's default, ``idp.sensitivity = 'instance'``, or its ``'piecewise'`` form;
        docs/privacy.md §5.3)."""
        return self.resolve_sensitivity(rules) in ("instance", "piecewise")

    def resolve_noise(self, rules: Rules, model: str) -> str:
        """The noise of DP's COUNT, SUM and AVG: the one SET, else the owner's default
        where it fits (DP). Gaussian noise is charged by its ρ, so only the zcdp
        accountant takes it; iDP answers stay on their pure ε (docs/budget.md)."""
        if self.noise != GAUSSIAN:
            return self.noise or default_noise(model, rules)
        if rules.defaults.accounting != "zcdp":
            raise BadSetting("idp.noise = 'gaussian' needs the zcdp accountant ([defaults] "
                             "accounting = \"zcdp\" in the rules); this proxy sums pure ε")
        if model != "dp":
            raise BadSetting("idp.noise = 'gaussian' is for idp.model = 'dp'; iDP answers "
                             "take Laplace noise at their pure epsilon")
        return GAUSSIAN

    def resolve_epsilon(self, rules: Rules, hint: Decimal | None) -> Decimal:
        epsilon = hint or self.epsilon or rules.defaults.epsilon_per_query
        low, limit = rules.defaults.min_epsilon_per_query, rules.defaults.max_epsilon_per_query
        if not low <= epsilon <= limit:
            raise BadSetting(
                f"epsilon {epsilon} is outside this proxy's limits per query; "
                f"choose a value from {low} to {limit}"
            )
        return epsilon


def _fits(model: str, rules: Rules) -> tuple[str, ...]:
    """The sensitivities a model takes: raw iDP's 'local' only where the owner opted in."""
    local = ("local",) if model == "idp" and rules.defaults.noise_scale == "local" else ()
    return local + FITS[model]


def default_sensitivity(model: str, rules: Rules) -> str:
    """'local' where the owner opted into raw iDP, else the exponential mechanism."""
    return _fits(model, rules)[0]


def default_noise(model: str, rules: Rules) -> str:
    """The owner's ``[defaults] noise`` where it applies (DP), else Laplace."""
    return rules.defaults.noise if model == "dp" else LAPLACE


def _either(names: tuple[str, ...]) -> str:
    quoted = [f"'{name}'" for name in names]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"


@dataclass(frozen=True)
class SessionCommand:
    """SET (value given), RESET (value None, show False) or SHOW (show True); ``local``:
    SET LOCAL, until the transaction block ends (proxy.setting_scopes)."""

    name: str
    value: str | None = None
    show: bool = False
    local: bool = False


def session_command(statement: exp.Expression) -> SessionCommand | None:
    """Recognise SET/RESET/SHOW; None for anything else."""
    if isinstance(statement, exp.Set):
        items = statement.expressions
        if len(items) != 1 or not isinstance(items[0].this, exp.EQ):
            raise NotSupported("only SET name = value is supported; e.g. SET idp.epsilon = 0.1")
        target, value = items[0].this.this, items[0].this.expression
        name = target.sql(dialect="postgres").lower()
        text = value.name if isinstance(value, (exp.Literal, exp.Identifier)) else value.sql()
        return SessionCommand(name, text, local=items[0].args.get("kind") == "LOCAL")
    if isinstance(statement, exp.Command):
        word = statement.this.upper()
        rest = statement.expression
        rest = rest.name if isinstance(rest, exp.Expression) else str(rest or "")
        zone = _TIME_ZONE.fullmatch(rest.strip()) if word == "SET" else None
        if zone is not None:  # SET TIME ZONE 'Europe/Berlin' (the SQL standard's form)
            return SessionCommand("timezone", zone.group(2).strip("'\""),
                                  local=zone.group(1) is not None)
        if word == "SET":
            raise ReadOnly(f"SET {rest.split()[0] if rest else ''} is not allowed through the "
                           "proxy; only session settings such as SET idp.epsilon = 0.1")
        if word in ("RESET", "SHOW") and re.fullmatch(r"[A-Za-z_][\w.]*", rest.strip()):
            return SessionCommand(rest.strip().lower(), None, show=word == "SHOW")
    return None


def apply_command(settings: Settings, command: SessionCommand) -> Settings:
    """The settings after a SET or RESET (SHOW leaves them unchanged)."""
    if command.show:
        return settings
    name, value = command.name, command.value
    if name == "all" and value is None:
        return Settings()
    if name == "idp.epsilon":
        return replace(settings, epsilon=None if value is None else _epsilon(value))
    if name == "idp.model":
        return replace(settings, model=None if value is None else _choice(name, value, MODELS))
    if name == "idp.sensitivity":
        return replace(settings, sensitivity=None if value is None else
                       _choice(name, value, SENSITIVITIES))
    if name == "idp.intervals":
        return replace(settings, intervals=value is not None and _switch(name, value))
    if name == "idp.gamma":
        return replace(settings, gamma=None if value is None else _gamma(value))
    if name == "idp.prior":
        return replace(settings, prior=None if value is None else _prior(value))
    if name == "idp.noise":
        return replace(settings, noise=None if value is None else _choice(name, value, NOISES))
    if name == "timezone":
        return replace(settings, time_zone=UTC if value is None else session_zone(value))
    if name.startswith("idp."):
        raise BadSetting(f"unknown setting {name}; the idp settings are idp.epsilon, "
                         "idp.model, idp.sensitivity, idp.gamma, idp.intervals, idp.prior, idp.noise "
                         "(and SHOW idp.budget)")
    other = dict(settings.other)
    if value is None:
        other.pop(name, None)
    else:
        other[name] = value
    return replace(settings, other=tuple(sorted(other.items())))


def epsilon_hint(statement: exp.Expression) -> Decimal | None:
    """The ε of a leading ``/*+ epsilon=0.05 */`` comment, if any."""
    for comment in statement.comments or ():
        match = _HINT.match(comment.strip())
        if not match:
            continue
        for pair in match.group(1).split():
            key, _, value = pair.partition("=")
            if key.lower() != "epsilon" or not value:
                raise BadSetting(f"unknown hint {pair!r}; the only hint is /*+ epsilon=0.05 */")
            return _epsilon(value)
    return None


def _epsilon(value: str) -> Decimal:
    try:
        return parse_epsilon(value)
    except ValueError as exc:
        raise BadSetting(str(exc)) from None


def _gamma(value: str) -> float:
    try:
        gamma = float(value)
    except ValueError:
        gamma = float("nan")
    if not 1 < gamma <= 100:
        raise BadSetting(f"idp.gamma must be a number above 1 (and at most 100), got {value!r}; "
                         "the default is 3")
    return gamma


def _prior(value: str) -> PriorSpec:
    try:
        return parse_prior(value)
    except ValueError as exc:
        raise BadSetting(f"idp.prior: {exc}") from None


def _switch(name: str, value: str) -> bool:
    word = value.lower()
    if word not in ("on", "off", "true", "false"):
        raise BadSetting(f"{name} must be on or off, got {value!r}")
    return word in ("on", "true")


def _choice(name: str, value: str, allowed: tuple[str, ...]) -> str:
    if value.lower() not in allowed:
        raise BadSetting(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
    return value.lower()
