"""Planted-truth models: attention-only transformers whose every logit effect is known.

To measure whether a search finds the right heads at real-model scale (144 to 1024 heads) we
need models where the right answer is known exactly. `planted_model` builds one by hand: an
attention-only `HookedTransformer` without LayerNorm, prompts `<bos> f<j> x<i>` (always three
tokens), answer `y<i>`, wrong answer `D`, metric `logit_diff = logit(y<i>) - logit(D)`. Heads
attend uniformly (zero queries and keys) unless they are gates, and read only token
embeddings, so every head's contribution to the logits is a number fixed at build time:

- *helpful* heads (removal hurts) add `a[h, i] > 0` to every `y` logit;
- *harmful singles* add `c[h, i]` (mean `g`) to `D`;
- *noise* heads add `eps[h, j]` to `D`, drawn per filler `f<j>`; their expected effect is 0,
  but on a finite split it is not, and examples sharing a filler share it (the `group` of an
  example is its filler, so a clustered bootstrap is the honest one);
- *OR groups* (pairs, triples): each member writes 1 to a private residual direction `p`; a
  *reader* head in a later layer attends from the answer position to `<bos>` (value 0) when
  `p = 0` and to the `x` token (value `G * w[i]` into `D`) when any member is present. Scores
  differ by >= 100, so the softmax is exactly 0 or 1 in float32: removing any proper subset
  of members changes nothing, removing all of them takes `G` (mean) off `D`. The reader also
  writes `G + 1` to every `y` logit, so removing the reader itself clearly hurts;
- a *partial backup*: a harmful head `A` (mean `g_A`) that also writes to a private `p`, and
  a backup head `B` that attends to `<bos>` (no output) while `A` is present and otherwise
  writes `beta * g_A` to `D`. Removing `B` alone does nothing; removing `A` gains
  `(1 - beta) g_A`; removing both gains `g_A`;
- *gaming* heads (`PlantSpec.gaming_gains`, none by default): a gamer reads the constant
  direction (1 at every position, so `z = 1` under uniform attention) and writes `u` to every
  `y` logit and `u + g` to `D`, and the unembedding's constant row (a bias) takes `u` off
  every `y` logit and `u + g` off `D`, so the clean logits are exactly those of the model
  without the gamer. Removing it takes `u` off every `y` and `u + g` off `D`: `logit_diff`
  rises by exactly `g` on every example, while with `u = max_i Y_i + 8` (`Y_i` the clean `y<i>`
  logit, which no removal raises) every `y` logit falls to <= -8, below the 26 tokens at
  logit 0, so accuracy falls to 0 and the answer's log-prob by about 10 nats or more. A
  difference objective rewards the removal; the task gets worse (`workbench.guards`).

`PlantedModel.logit_diff(removed)` computes every example's logit difference from these
numbers alone, which the tests compare with the model's forward pass, and `best` holds the
set of each size with the largest expected gain (noise at its expectation 0), found by brute
force over the planted heads (every other head has expected gain <= 0 and no interaction);
`best_genuine` the same among the planted heads other than gamers (equal to `best` without
gamers).
Zero ablation only: the construction is about what a head writes, not about its mean.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import combinations

import numpy as np
import torch
from jaxtyping import Float
from torch import Tensor
from transformer_lens import HookedTransformer, HookedTransformerConfig

from workbench.compute import QUIET
from workbench.errors import WorkbenchError
from workbench.heads import Head
from workbench.metrics.scores import score_logits
from workbench.scoring.scorer import Targets
from workbench.tables import head_name
from workbench.tasks.encoding import TaskBatch, encode_task
from workbench.tasks.task import Example, Task
from workbench.tasks.tokenizer import WordTokenizer

_K_GATE = 400.0  # the attention score per unit of `p` in a gate's key
_K_BOS = 150.0  # the score of <bos>: between 0 (gate closed) and 0.75 * _K_GATE (open)


@dataclass(frozen=True)
class PlantSpec:
    """What to plant. Gains are in nats of `logit_diff` (expected over examples).

    Args:
        n_layers, n_heads: the model's shape.
        single_gains: one harmful single head per entry.
        pair_gains, triple_gains: one OR pair / OR triple per entry (members in distinct
            layers, the reader in a later layer).
        backup: `(g_A, beta)` for a partial backup, or None.
        gaming_gains: one gaming head per entry (its removal's `logit_diff` gain; see the
            module docstring); none by default, which leaves every other plant unchanged.
        helpful_fraction: the share of the remaining heads whose removal hurts.
        helpful_scale: helpful heads add `U(0.05, 1) * helpful_scale` on average.
        noise_sd: the largest per-filler standard deviation of a noise head's effect.
        n_x: answer tokens; n_fillers: fillers (the first half select, the rest held out).
        seed: places the heads and draws every number.
    """

    n_layers: int = 12
    n_heads: int = 12
    single_gains: tuple[float, ...] = (2.0, 1.6, 1.2)
    pair_gains: tuple[float, ...] = (5.0, 3.5)
    triple_gains: tuple[float, ...] = (9.0,)
    backup: tuple[float, float] | None = (2.5, 0.6)
    gaming_gains: tuple[float, ...] = ()
    helpful_fraction: float = 0.4
    helpful_scale: float = 0.3
    noise_sd: float = 0.1
    n_x: int = 8
    n_fillers: int = 16
    seed: int = 0

    def __post_init__(self) -> None:
        if self.n_layers < 4 or self.n_heads < 2:
            raise WorkbenchError(
                f"a planted model needs >= 4 layers and >= 2 heads; got {self.n_layers} x "
                f"{self.n_heads}"
            )
        if self.n_fillers < 2 or self.n_fillers % 2:
            raise WorkbenchError(f"n_fillers must be even and >= 2; got {self.n_fillers}")
        if not 0.0 <= self.helpful_fraction < 1.0:
            raise WorkbenchError(f"helpful_fraction must be in [0, 1); got {self.helpful_fraction}")
        if self.backup is not None and not 0.0 <= self.backup[1] < 1.0:
            raise WorkbenchError(f"backup beta must be in [0, 1); got {self.backup[1]}")
        if any(not g > 0 for g in self.gaming_gains):
            raise WorkbenchError(f"gaming gains must be > 0; got {self.gaming_gains}")

    @classmethod
    def null(cls, **kw) -> "PlantSpec":
        """No head whose removal helps in expectation: helpful and noise heads only."""
        return cls(single_gains=(), pair_gains=(), triple_gains=(), backup=None, **kw)


@dataclass
class PlantedModel:
    """A planted model, its task and its known answer.

    Attributes:
        model: the HookedTransformer (a `word_tokenizer` attached).
        task: the task (`select` = first half of the fillers, `group` = the filler).
        spec: what was planted.
        roles: head -> `helpful`, `single`, `noise`, `member`, `reader`, `backup_a`,
            `backup_b`, `gamer` (heads of no listed role have no effect at all).
        groups: the OR groups, `(members, reader, G)`.
        best: size -> the head names (comma-joined, sorted) of the planted best set.
        best_gain: size -> its expected gain.
        best_genuine, best_genuine_gain: the same among planted heads other than gamers
            (the sets a guarded search should find; equal to `best` without gamers).
    """

    model: HookedTransformer
    task: Task
    spec: PlantSpec
    roles: dict[Head, str]
    groups: list[tuple[tuple[Head, ...], Head, float]]
    best: dict[int, str] = field(default_factory=dict)
    best_gain: dict[int, float] = field(default_factory=dict)
    best_genuine: dict[int, str] = field(default_factory=dict)
    best_genuine_gain: dict[int, float] = field(default_factory=dict)
    _help: dict[Head, np.ndarray] = field(default_factory=dict, repr=False)  # per x
    _harm: dict[Head, np.ndarray] = field(default_factory=dict, repr=False)  # per x, into D
    _noise: dict[Head, np.ndarray] = field(default_factory=dict, repr=False)  # per filler
    _gate_w: list[np.ndarray] = field(default_factory=list, repr=False)  # per group, per x
    _backup: tuple[Head, Head, float] | None = None  # (A, B, beta * g_A)
    _gamers: dict[Head, tuple[float, float]] = field(default_factory=dict, repr=False)  # (u, g)

    @property
    def n_heads(self) -> int:
        return self.spec.n_layers * self.spec.n_heads

    def logit_diff(self, removed=(), split: str | None = None) -> np.ndarray:
        """Every example's `logit_diff` with `removed` heads zero-ablated, from the planted
        numbers alone (no forward pass), in task order."""
        gone = {_as_head(h) for h in removed}
        rows = []
        for e in self.task.examples:
            if split is not None and e.split != split:
                continue
            i, j = int(e.prompt.split()[1][1:]), int(e.prompt.split()[0][1:])
            v = 1.0  # the embedding of x<i> writes y<i> directly
            v += sum(a[i] for h, a in self._help.items() if h not in gone)
            v -= sum(c[i] for h, c in self._harm.items() if h not in gone)
            v -= sum(n[j] for h, n in self._noise.items() if h not in gone)
            for (members, reader, g), w in zip(self.groups, self._gate_w, strict=True):
                if reader in gone:
                    continue
                v += g + 1.0
                if any(m not in gone for m in members):
                    v -= g * w[i]
            if self._backup is not None:
                a, b, harm = self._backup
                if a in gone and b not in gone:
                    v -= harm
            # a removed gamer takes u off y<i> and u + g off D
            v += sum(g for h, (_, g) in self._gamers.items() if h in gone)
            rows.append(v)
        return np.asarray(rows)

    def scorer(self, split: str | None = "select") -> "AnalyticScorer":
        """A drop-in for `MaskScorer` on this model that computes scores from the planted
        numbers instead of running the model (exact up to float32 rounding; tested)."""
        return AnalyticScorer(self, encode_task(self.model, self.task, split))

    def expected_gain(self, removed) -> float:
        """The gain of removing `removed`, averaged over x tokens, noise at its expectation 0."""
        gone = {_as_head(h) for h in removed}
        gain = -sum(float(a.mean()) for h, a in self._help.items() if h in gone)
        gain += sum(float(c.mean()) for h, c in self._harm.items() if h in gone)
        for members, reader, g in self.groups:
            if reader in gone:
                gain -= g + 1.0
                continue
            if all(m in gone for m in members):
                gain += g
        if self._backup is not None:
            a, b, harm = self._backup
            if a in gone and b not in gone:
                gain -= harm
        gain += sum(g for h, (_, g) in self._gamers.items() if h in gone)
        return gain


class AnalyticScorer:
    """`MaskScorer`'s `clean()` / `score(masks)` for a planted model, without forward passes.

    The logits at the answer position are rebuilt from the planted numbers (every `y` logit
    shares the helpful heads' and readers' sum, `y<i>` gets 1 more, `D` the harmful sum, a
    removed gamer takes `u` off every `y` and `u + g` off `D`, every other token 0) and
    scored by the same `score_logits` as the model's, so search strategies see the numbers a
    forward pass would give at a tiny fraction of the cost. For benchmarks at
    1024 heads on a CPU; `tests/test_recall.py` checks it against `MaskScorer`.
    """

    def __init__(self, planted: "PlantedModel", data: TaskBatch) -> None:
        self.model, self.data, self.planted = planted, data, planted
        self.model = planted.model
        self.compute = QUIET  # no progress bars: a closed-form score is instant
        spec = planted.spec
        L, H = spec.n_layers, spec.n_heads
        n = L * H
        xi = torch.tensor([int(e.prompt.split()[1][1:]) for e in data.task.examples])
        fj = torch.tensor([int(e.prompt.split()[0][1:]) for e in data.task.examples])
        self._xi = xi
        help_ = torch.zeros(n, spec.n_x, dtype=torch.float64)
        harm = torch.zeros(n, spec.n_x, dtype=torch.float64)
        noise = torch.zeros(n, spec.n_fillers, dtype=torch.float64)
        for (l, h), a in planted._help.items():
            help_[l * H + h] = torch.from_numpy(a)
        for (l, h), c in planted._harm.items():
            harm[l * H + h] = torch.from_numpy(c)
        for (l, h), e in planted._noise.items():
            noise[l * H + h] = torch.from_numpy(e)
        self._help = help_[:, xi]  # (n_heads, batch)
        self._harm = harm[:, xi] + noise[:, fj]  # (n_heads, batch): into D
        self._groups = [
            ([l * H + h for l, h in members], reader[0] * H + reader[1], g, torch.from_numpy(w)[xi])
            for (members, reader, g), w in zip(planted.groups, planted._gate_w, strict=True)
        ]
        self._backup = (
            None
            if planted._backup is None
            else (
                planted._backup[0][0] * H + planted._backup[0][1],
                planted._backup[1][0] * H + planted._backup[1][1],
                planted._backup[2],
            )
        )
        self._gamers = [(l * H + h, u, g) for (l, h), (u, g) in planted._gamers.items()]
        self._clean: dict[str, Tensor] | None = None

    def _logits(self, removed: Float[Tensor, "n_masks n_heads"]) -> Tensor:
        kept = 1.0 - removed.double()
        yall = kept @ self._help  # (n_masks, batch)
        d = kept @ self._harm
        for members, reader, g, w in self._groups:
            reader_kept = kept[:, reader : reader + 1]
            yall = yall + reader_kept * (g + 1.0)
            open_ = (kept[:, members].amax(-1, keepdim=True) > 0).double()
            d = d + reader_kept * open_ * g * w[None]
        if self._backup is not None:
            a, b, harm = self._backup
            d = d + (1.0 - kept[:, a : a + 1]) * kept[:, b : b + 1] * harm
        for j, u, g in self._gamers:  # kept: its output cancels the unembedding's bias
            gone = 1.0 - kept[:, j : j + 1]
            yall = yall - gone * u
            d = d - gone * (u + g)
        n_masks, batch = yall.shape
        vocab = self.model.cfg.d_vocab
        tok = self.model.word_tokenizer
        y_ids = torch.tensor([tok.token_id(f"y{i}") for i in range(self.planted.spec.n_x)])
        logits = torch.zeros(n_masks, batch, vocab, dtype=torch.float64)
        logits[:, :, y_ids] = yall[..., None]
        rows = torch.arange(batch)
        logits[:, rows, y_ids[self._xi]] += 1.0
        logits[:, :, tok.token_id("D")] = d
        return logits.float().reshape(n_masks * batch, vocab)

    def clean(self) -> dict[str, Tensor]:
        if self._clean is None:
            n = self.planted.n_heads
            self._clean = self._score(torch.zeros(1, n))
            self._clean = {m: v[0] for m, v in self._clean.items()}
        return self._clean

    def _score(self, removed: Tensor) -> dict[str, Tensor]:
        batch = len(self.data)
        k = removed.shape[0]
        targets = Targets.of(self.data, k)
        return {
            m: v.view(k, batch) for m, v in score_logits(self._logits(removed), targets).items()
        }

    def score(
        self,
        masks: Float[Tensor, "n_masks layer head_index"],
        progress: bool = False,
        desc: str = "masks",
        rows: Tensor | None = None,
    ) -> dict[str, Float[Tensor, "n_masks batch"]]:
        """Per-example scores with each mask's heads ablated (1 = ablated), on `rows` only
        when given (as `MaskScorer.score`)."""
        self.clean()
        flat = masks.reshape(masks.shape[0], -1).cpu()
        out: dict[str, list[Tensor]] = {}
        for s in range(0, flat.shape[0], 256):
            for m, v in self._score(flat[s : s + 256]).items():
                out.setdefault(m, []).append(v)
        n_out = len(self.data) if rows is None else len(rows)
        if not out:
            return {m: torch.empty(0, n_out) for m in self.clean()}
        full = {m: torch.cat(v) for m, v in out.items()}
        if rows is None:
            return full
        return {m: v[:, torch.as_tensor(rows).cpu()] for m, v in full.items()}


def _as_head(h) -> Head:
    if isinstance(h, str):
        layer, head = h[1:].split("H")
        return int(layer), int(head)
    return int(h[0]), int(h[1])


def _centred_weights(rng: np.random.Generator, n: int, spread: float = 0.5) -> np.ndarray:
    """Positive per-example weights with mean exactly 1."""
    u = rng.uniform(-1.0, 1.0, n)
    return 1.0 + spread * (u - u.mean())


def _place_group(rng, free: set[Head], n_layers: int, size: int) -> tuple[tuple[Head, ...], Head]:
    """Members in `size` distinct layers, the reader in a later layer; all heads free."""
    for _ in range(1000):
        layers = sorted(rng.choice(n_layers - 1, size=size, replace=False).tolist())
        reader_layer = int(rng.integers(layers[-1] + 1, n_layers))
        members = []
        for layer in layers:
            options = sorted(h for h in free if h[0] == layer and h not in members)
            if not options:
                break
            members.append(options[int(rng.integers(len(options)))])
        options = sorted(h for h in free if h[0] == reader_layer and h not in members)
        if len(members) == size and options:
            return tuple(members), options[int(rng.integers(len(options)))]
    raise WorkbenchError(f"no room to plant an OR group of {size} heads")


def planted_model(spec: PlantSpec | None = None, device: str = "cpu") -> PlantedModel:
    """Build the planted model and task described in the module docstring."""
    spec = spec or PlantSpec()
    rng = np.random.default_rng([spec.seed, 2026])
    L, H, NX, NF = spec.n_layers, spec.n_heads, spec.n_x, spec.n_fillers
    groups_spec = [(2, g) for g in spec.pair_gains] + [(3, g) for g in spec.triple_gains]
    n_gates = len(groups_spec) + (spec.backup is not None)
    # Residual directions.
    CONST, NONBOS, BOS = 0, 1, 2
    X = 3
    F = X + NX
    YALL = F + NF
    Y = YALL + 1
    D = Y + NX
    P = D + 1
    d_model = P + n_gates
    vocab = (
        ["<bos>", "<pad>"]
        + [f"x{i}" for i in range(NX)]
        + [f"y{i}" for i in range(NX)]
        + ["D"]
        + [f"f{j}" for j in range(NF)]
    )
    tok = WordTokenizer(vocab)
    ids = {w: i for i, w in enumerate(vocab)}
    d_head = 2
    cfg = HookedTransformerConfig(
        n_layers=L,
        n_heads=H,
        d_model=d_model,
        d_head=d_head,
        n_ctx=4,
        d_vocab=len(vocab),
        attn_only=True,
        normalization_type=None,
        positional_embedding_type="standard",
        device=device,
        seed=spec.seed,
    )
    model = HookedTransformer(cfg)
    pm = PlantedModel(model=model, task=None, spec=spec, roles={}, groups=[])  # type: ignore[arg-type]
    free = {(l, h) for l in range(L) for h in range(H)}
    heads_needed = (
        len(spec.single_gains) + len(spec.gaming_gains) + sum(s + 1 for s, _ in groups_spec)
    )
    if heads_needed + 2 * (spec.backup is not None) > len(free):
        raise WorkbenchError(f"{L} x {H} heads are too few for what PlantSpec plants")
    scale = float(np.sqrt(d_head))  # TransformerLens divides scores by sqrt(d_head)
    W = {name: torch.zeros(L, H, *shape) for name, shape in (
        ("W_Q", (d_model, d_head)), ("W_K", (d_model, d_head)),
        ("W_V", (d_model, d_head)), ("W_O", (d_head, d_model)),
    )}  # fmt: skip
    b_Q = torch.zeros(L, H, d_head)

    def take(head: Head, role: str) -> None:
        free.discard(head)
        pm.roles[head] = role

    def linear_head(head: Head, read: int, values: np.ndarray, write: int) -> None:
        # Uniform attention over 3 positions: z = value(x or f token) / 3, so scale by 3.
        l, h = head
        for k, v in enumerate(values):
            W["W_V"][l, h, read + k, 0] = 3.0 * float(v)
        W["W_O"][l, h, 0, write] = 1.0

    def gate_writer(head: Head, gate: int) -> None:
        # z[1] = 1.5 * (share of non-bos positions seen): 0 at <bos>, 0.75 at f, 1 at x.
        l, h = head
        W["W_V"][l, h, NONBOS, 1] = 1.5
        W["W_O"][l, h, 1, P + gate] = 1.0

    gate = 0
    for size, g in groups_spec:
        members, reader = _place_group(rng, free, L, size)
        for m in members:
            take(m, "member")
            gate_writer(m, gate)
        take(reader, "reader")
        w = _centred_weights(rng, NX, 0.4)
        l, h = reader
        b_Q[l, h, 0] = scale
        W["W_K"][l, h, P + gate, 0] = _K_GATE
        W["W_K"][l, h, BOS, 0] = _K_BOS
        W["W_V"][l, h, CONST, 0] = 1.0
        for i in range(NX):
            W["W_V"][l, h, X + i, 1] = float(w[i])
        W["W_O"][l, h, 0, YALL] = g + 1.0
        W["W_O"][l, h, 1, D] = g
        pm.groups.append((members, reader, float(g)))
        pm._gate_w.append(w)
        gate += 1
    if spec.backup is not None:
        g_a, beta = spec.backup
        (a,), b = _place_group(rng, free, L, 1)
        take(a, "backup_a")
        take(b, "backup_b")
        c = g_a * _centred_weights(rng, NX)
        linear_head(a, X, c, D)
        pm._harm[a] = c
        gate_writer(a, gate)
        l, h = b
        b_Q[l, h, 0] = scale
        W["W_K"][l, h, NONBOS, 0] = _K_BOS
        W["W_K"][l, h, P + gate, 0] = -_K_GATE
        W["W_V"][l, h, NONBOS, 1] = 1.0
        W["W_O"][l, h, 1, D] = beta * g_a
        pm._backup = (a, b, beta * g_a)
    order = sorted(free)
    for g in spec.single_gains:
        head = order.pop(int(rng.integers(len(order))))
        take(head, "single")
        c = g * _centred_weights(rng, NX)
        linear_head(head, X, c, D)
        pm._harm[head] = c
    gamers = []  # placed here, written once the helpful heads (and so u) are known
    for g in spec.gaming_gains:
        head = order.pop(int(rng.integers(len(order))))
        take(head, "gamer")
        gamers.append((head, float(g)))
    rest = sorted(free)
    rng.shuffle(rest)
    n_help = int(round(spec.helpful_fraction * len(rest)))
    for head in rest[:n_help]:
        take(head, "helpful")
        a = spec.helpful_scale * rng.uniform(0.05, 1.0) * _centred_weights(rng, NX)
        linear_head(head, X, a, YALL)
        pm._help[head] = a
    for head in sorted(rest[n_help:]):
        take(head, "noise")
        eps = rng.normal(0.0, spec.noise_sd * rng.uniform(0.0, 1.0), NF)
        linear_head(head, F, eps, D)
        pm._noise[head] = eps
    # The clean y<i> logit without gamers: 1 + helpful + readers, the most any removal leaves.
    y_top = 1.0 + sum(a for a in pm._help.values()) + sum(g + 1.0 for _, _, g in pm.groups)
    u = float(np.max(y_top)) + 8.0 if gamers else 0.0
    for head, g in gamers:
        l, h = head
        W["W_V"][l, h, CONST, 0] = 1.0  # z[0] = 1 at every position
        W["W_O"][l, h, 0, YALL] = u
        W["W_O"][l, h, 0, D] = u + g
        pm._gamers[head] = (u, g)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        E = model.embed.W_E
        E[:, CONST] = 1.0
        E[:, NONBOS] = 1.0
        E[ids["<bos>"], NONBOS] = 0.0
        E[ids["<bos>"], BOS] = 1.0
        for i in range(NX):
            E[ids[f"x{i}"], X + i] = 1.0
            E[ids[f"x{i}"], Y + i] = 1.0
            model.unembed.W_U[Y + i, ids[f"y{i}"]] = 1.0
            model.unembed.W_U[YALL, ids[f"y{i}"]] = 1.0
        for j in range(NF):
            E[ids[f"f{j}"], F + j] = 1.0
        model.unembed.W_U[D, ids["D"]] = 1.0
        for _, (u_k, g_k) in pm._gamers.items():  # a bias that the gamers' outputs cancel
            for i in range(NX):
                model.unembed.W_U[CONST, ids[f"y{i}"]] -= u_k
            model.unembed.W_U[CONST, ids["D"]] -= u_k + g_k
        for l, block in enumerate(model.blocks):
            attn = block.attn
            attn.W_Q.copy_(W["W_Q"][l])
            attn.W_K.copy_(W["W_K"][l])
            attn.W_V.copy_(W["W_V"][l])
            attn.W_O.copy_(W["W_O"][l])
            attn.b_Q.copy_(b_Q[l])
    model.word_tokenizer = tok
    model.eval()
    examples = [
        Example(
            id=f"f{j}-x{i}",
            prompt=f"f{j} x{i}",
            answers=(f"y{i}",),
            wrong=("D",),
            split="select" if j < NF // 2 else "heldout",
            group=f"f{j}",
        )
        for j in range(NF)
        for i in range(NX)
    ]
    pm.task = Task(
        name="planted",
        examples=examples,
        metric="logit_diff",
        description="answer y<i> to 'f<j> x<i>' on a planted model; D is the distractor",
        source="bench/planted.py",
    )
    kinds = ("single", "member", "backup_a", "backup_b")
    genuine = [h for h, r in pm.roles.items() if r in kinds]
    planted = [h for h, r in pm.roles.items() if r in (*kinds, "gamer")]
    for heads_in, best, best_gain in (
        (planted, pm.best, pm.best_gain),
        (genuine, pm.best_genuine, pm.best_genuine_gain),
    ):
        for size in (1, 2, 3):
            scored = [(pm.expected_gain(s), s) for s in combinations(sorted(heads_in), size)]
            if not scored:
                continue
            gain, heads = max(scored, key=lambda t: t[0])  # the first on ties: lexicographic
            if gain > 0:
                best[size] = ",".join(head_name(*h) for h in heads)
                best_gain[size] = gain
    return pm
