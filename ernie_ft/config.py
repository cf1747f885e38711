"""Run configuration: the config dataclasses, one per recipe section (``recipes`` builds them from a YAML recipe
and command-line overrides), and the defaults that depend on several of them.

Nothing here imports paddle.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Optional

from ernie_ft.errors import UserError


@dataclass
class DataConfig:
    train: Optional[str] = None
    """Training file: TSV, CSV or JSONL (see data/README.md)."""
    dev: Optional[str] = None
    """Development file, evaluated during training to pick the best checkpoint."""
    test: Optional[str] = None
    """Test file, scored once with the best checkpoint at the end."""
    text_column: Optional[str] = None
    """Column (or JSON key) with the text. Default: text_a, text, sentence or content."""
    text_pair_column: Optional[str] = None
    """Column with the second text of a pair. Default: text_b or sentence2 when present."""
    label_column: str = "label"
    """Column with the label."""
    label_names: Optional[str] = None
    """Names for coded labels, e.g. 0=负面,1=正面 (a recipe may give a mapping): the model, its predictions,
    reports and pictures use the names; a file may hold either the codes or the names."""
    max_len: int = 128
    """Tokens per model input, [CLS] and [SEP] included; longer texts become windows."""
    stride: Optional[int] = None
    """Tokens shared by consecutive windows of a text longer than --max-len (at most half). Default: a quarter."""
    window_pooling: str = "mean"
    """How the windows of one text are combined at evaluation and prediction: mean or max."""
    allow_new_labels: bool = False
    """Accept dev/test labels that train never had (they count as errors)."""
    user_dict: Optional[str] = None
    """jieba user dictionary (one word per line, optional frequency and tag)."""
    num_proc: int = 1
    """Processes for tokenisation."""
    cache_dir: Optional[str] = None
    """Tokenisation cache. Default: $ERNIE_FT_CACHE or ~/.cache/ernie_ft."""
    dev_split: Optional[float] = None
    """Without --dev: hold out this fraction of the training examples as dev (e.g. 0.1), the same ones on every run."""
    header: Optional[bool] = None
    """Whether a TSV/CSV/Excel file's first row names its columns. Default: found from the file (known column
    names, or a first row whose values appear nowhere else in their columns)."""
    sheet: Optional[str] = None
    """The sheet of an .xlsx workbook to read. Default: the first."""
    predictions_as_labels: bool = False
    """Label Studio exports: train on the predictions (a model's pre-annotations) of a task that has no
    annotation, as if a person had labelled it. Default: such a task is unannotated, and the loading line counts it."""

    def overlap(self) -> int:
        """Tokens shared by consecutive windows."""
        return self.max_len // 4 if self.stride is None else self.stride

    def __post_init__(self):
        if self.window_pooling not in ("mean", "max"):
            raise UserError(f"--window-pooling must be mean or max, not {self.window_pooling!r}")
        if self.max_len < 8:
            raise UserError(f"--max-len {self.max_len} is too small; use at least 8")
        if self.stride is not None and not 0 <= self.stride <= self.max_len // 2:
            raise UserError(f"--stride {self.stride} must be between 0 and half of --max-len ({self.max_len // 2})")
        if self.num_proc < 1:
            raise UserError("--num-proc must be at least 1")
        if self.dev_split is not None and not 0 < self.dev_split < 1:
            raise UserError(f"--dev-split {self.dev_split}: give the fraction of --train to hold out, e.g. 0.1")
        if self.dev_split is not None and self.dev:
            raise UserError("--dev-split holds out part of --train as dev; give either --dev FILE or --dev-split")
        self.label_name_map()  # a malformed mapping fails here, before any file is read

    def label_name_map(self) -> dict[str, str]:
        """--label-names as {code: name} ({} when not given)."""
        if not self.label_names:
            return {}
        names = {}
        for item in self.label_names.split(","):
            code, sep, name = (part.strip() for part in item.partition("="))
            if not sep or not code or not name:
                raise UserError(f"--label-names: {item.strip()!r} is not CODE=NAME; write e.g. 0=负面,1=正面")
            if code in names:
                raise UserError(f"--label-names: the code {code!r} is named twice")
            names[code] = name
        repeated = sorted({n for n in names.values() if list(names.values()).count(n) > 1})
        if repeated:
            raise UserError(f"--label-names: the name {repeated[0]!r} is given to more than one code")
        return names


@dataclass
class ModelConfig:
    model: str = "scratch:tiny"
    """PaddleNLP model name (e.g. ernie-3.0-medium-zh), a checkpoint directory (ernie_ft, PaddleNLP, or a Hugging
    Face transformers BERT/ERNIE checkpoint), or a randomly initialised scratch:tiny, scratch:nano, scratch:medium
    or scratch:LxH (L layers of width H, e.g. scratch:2x128)."""
    vocab: Optional[str] = None
    """Vocabulary file for a scratch model (one token per line), or a tokenizer directory (a checkpoint's: its
    vocabulary and tokenization settings). Default: built from the training data."""
    dropout: Optional[float] = None
    """Override the hidden and attention dropout of the model."""
    vocab_extension: Optional[str] = None
    """Word pieces learned by python -m ernie_ft.vocab learn (a directory); the embedding grows to fit them."""
    trust_pickle: bool = False
    """Load a --model directory whose weights are a pickle (model_state.pdparams), which can run code: only for a
    source you trust."""
    new_head: bool = False
    """Start the task head from random weights, the rest from --model: to fine-tune a fine-tuned checkpoint on
    another label set (its head was trained for its own labels)."""

    def __post_init__(self):
        if self.new_head and self.model.startswith("scratch:"):
            raise UserError(f"--new-head is for a --model checkpoint; a --model {self.model} head is new anyway")


SCRATCH_LR = 1e-3
"""The default --lr of a randomly initialised model: the rate docs/results.md shows learning from random weights
on each built-in task (ChnSentiCorp, CLUENER, CMRC 2018; the sample data in data/ as well)."""
PRETRAINED_LR = 5e-5
"""The default --lr of a pretrained model: the usual rate for fine-tuning BERT and ERNIE."""


@dataclass
class TrainConfig:
    output: Optional[str] = None
    """Output directory: best checkpoint, metrics.json, logs and plots."""
    epochs: int = 3
    """Passes over the training data."""
    batch_size: int = 32
    """Inputs per device and step (before gradient accumulation)."""
    lr: Optional[float] = None
    """Peak learning rate for one device. Default: ``SCRATCH_LR`` for a randomly initialised model (scratch:...),
    ``PRETRAINED_LR`` for a pretrained one (a PaddleNLP name or a checkpoint directory)."""
    warmup: float = 0.1
    """Fraction of the steps with a linear learning-rate warm-up."""
    weight_decay: float = 0.01
    """AdamW weight decay (not applied to biases and LayerNorm)."""
    adam_epsilon: float = 1e-8
    """AdamW's epsilon: the floor under each gradient's running RMS."""
    max_grad_norm: float = 1.0
    """Clip gradients to this global norm; 0 turns clipping off."""
    grad_accum: int = 1
    """Batches whose gradients are summed before each optimizer step."""
    amp: str = "off"
    """Mixed precision: off, fp16 (with a loss scaler) or bf16."""
    amp_level: str = "O1"
    """O1: cast op by op; O2: keep the weights in low precision too."""
    recompute: bool = False
    """Recompute each encoder layer in the backward pass to save activation memory."""
    eval_steps: int = 0
    """Evaluate every N optimizer steps; 0 evaluates at the end of each epoch."""
    log_steps: int = 10
    """Log the training loss every N optimizer steps."""
    metric: Optional[str] = None
    """Dev metric that picks the best checkpoint. Default: the task's (accuracy for classification)."""
    patience: int = 0
    """Stop after this many evaluations without improvement; 0 never stops early."""
    seed: int = 42
    """Random seed for initialisation, data order and dropout."""
    stop_after_steps: int = 0
    """Stop after N optimizer steps with a resumable checkpoint (the schedule still spans --epochs)."""
    device: str = "auto"
    """cpu, gpu, gpu:N, or auto (a GPU when Paddle has one)."""
    threads: int = 0
    """Math threads per process on CPU; 0 shares the cores this process may use (its affinity) among the processes."""

    def __post_init__(self):
        if self.amp not in ("off", "fp16", "bf16"):
            raise UserError(f"--amp must be off, fp16 or bf16, not {self.amp!r}")
        if self.amp_level not in ("O1", "O2"):
            raise UserError(f"--amp-level must be O1 or O2, not {self.amp_level!r}")
        for name in ("epochs", "batch_size", "grad_accum", "log_steps"):
            if getattr(self, name) < 1:
                raise UserError(f"--{name.replace('_', '-')} must be at least 1")
        if not self.adam_epsilon > 0:
            raise UserError("--adam-epsilon must be greater than 0")
        if not 0 <= self.warmup < 1:
            raise UserError("--warmup is a fraction of the steps, between 0 and 1")
        if self.lr is not None and not self.lr > 0:
            raise UserError(f"--lr must be greater than 0, not {self.lr}")


@dataclass
class ParallelConfig:
    nproc: int = 1
    """Processes on this machine (per node with ``nnodes``) for CPU data parallelism (gloo); each gets an equal share
    of the cores."""
    gpus: Optional[str] = None
    """GPUs to train on, e.g. 0,1,2,3: one process per GPU (NCCL); with ``nnodes``, the GPUs of this node."""
    ips: Optional[str] = None
    """Node IPs for multi-node training, e.g. 10.0.0.1,10.0.0.2; run the same command on every node."""
    nnodes: Optional[int] = None
    """Nodes of a multi-node job: run the same command on each, with ``master``; ``nproc`` or ``gpus`` per node."""
    master: Optional[str] = None
    """HOST:PORT where the nodes meet, the same on every node: one node's address and a port free there (its
    launcher serves the rendezvous), e.g. 10.0.0.1:8090."""
    node_rank: Optional[int] = None
    """This node's rank, 0 to N-1 for ``nnodes`` N (give it on every node or on none); node 0 writes the output.
    Default: the node at ``master`` is 0, the others in no fixed order."""
    rendezvous_timeout: float = 600
    """Seconds a node of several waits at ``master`` for the others to join before it stops with an error (exit 2):
    long enough for a scheduler to start every node (pulling a container image can take minutes), short enough
    that a node whose peer has failed frees its machine."""
    tensor_parallel: int = 1
    """Split every attention and feed-forward matrix across this many processes; the rest replicate data."""
    lr_scaling: str = "linear"
    """How --lr (given for one device) grows with the data-parallel replicas: linear, sqrt or none."""
    scale_lr_with_accum: bool = False
    """Count --grad-accum steps as replicas when scaling the learning rate."""

    def __post_init__(self):
        if self.lr_scaling not in ("linear", "sqrt", "none"):
            raise UserError(f"--lr-scaling must be linear, sqrt or none, not {self.lr_scaling!r}")
        if self.nproc < 1:
            raise UserError("--nproc must be at least 1")
        if self.tensor_parallel < 1:
            raise UserError("--tensor-parallel must be at least 1")
        if not self.rendezvous_timeout > 0:
            raise UserError(f"--rendezvous-timeout must be a number of seconds above 0, not {self.rendezvous_timeout}")
        if self.gpus is not None and not all(g.strip().isdigit() for g in self.gpus.split(",")):
            raise UserError(f"--gpus {self.gpus}: give GPU numbers separated by commas, e.g. --gpus 0,1,2,3")
        if self.gpus is not None and self.nproc > 1:
            raise UserError("--nproc is for CPU processes; with --gpus every listed GPU gets one process")
        self._check_nodes()

    def _check_nodes(self) -> None:
        """The multi-node flags: ``nnodes`` and ``master`` together, a well-formed HOST:PORT, a rank among the nodes."""
        if self.ips and (self.master is not None or self.nnodes is not None):
            raise UserError(
                f"--ips {self.ips} starts its nodes without a master: use either --ips alone or --nnodes N "
                "--master HOST:PORT, not both"
            )
        if self.nnodes is not None and self.nnodes < 1:
            raise UserError(f"--nnodes must be at least 1, not {self.nnodes}")
        if self.nnodes is not None and self.nnodes > 1 and self.master is None:
            raise UserError(
                f"--nnodes {self.nnodes} needs --master HOST:PORT, where the nodes meet: one node's address and a "
                "port free on it, the same on every node (e.g. --master 10.0.0.1:8090)"
            )
        if self.master is not None and self.nnodes is None:
            raise UserError(
                f"--master {self.master} needs --nnodes N, the number of nodes that meet there (the same on every "
                "node; --nnodes 1 trains on this node alone)"
            )
        if self.master is not None:
            master_address(self.master)
        if self.node_rank is not None and (self.nnodes or 1) < 2:
            raise UserError("--node-rank is for jobs of several nodes: give it with --nnodes N (N > 1) and --master")
        if self.node_rank is not None and not 0 <= self.node_rank < self.nnodes:
            raise UserError(
                f"--node-rank {self.node_rank}: a node's rank is 0 to {self.nnodes - 1} with --nnodes {self.nnodes}"
            )

    @property
    def nodes(self) -> int:
        """How many nodes the job spans: ``nnodes``, the addresses of ``ips``, or 1."""
        if self.ips:
            return len(self.ips.split(","))
        return self.nnodes or 1

    def lr_factor(self, replicas: int, grad_accum: int) -> float:
        """What the single-device --lr is multiplied by for this many replicas (and accumulation steps)."""
        k = replicas * (grad_accum if self.scale_lr_with_accum else 1)
        return {"linear": float(k), "sqrt": math.sqrt(k), "none": 1.0}[self.lr_scaling]


def learning_rate(cfg: RunConfig) -> tuple[float, Optional[str]]:
    """(the peak learning rate for one device, None when --lr gave it or else what the default is for): --lr from
    the flags or the recipe wins; without it the default for the model's kind, ``SCRATCH_LR`` for a randomly
    initialised model (``scratch:...``), ``PRETRAINED_LR`` for anything with pretrained weights."""
    if cfg.train.lr is not None:
        return cfg.train.lr, None
    if cfg.model.model.startswith("scratch:"):
        return SCRATCH_LR, "a randomly initialised model"
    return PRETRAINED_LR, "a pretrained model"


def master_address(master: str) -> tuple[str, int]:
    """(host, port) of ``--master HOST:PORT``, or UserError. Paddle's launcher splits it at its one colon, so IPv6
    addresses and URLs are refused."""
    host, sep, port = master.partition(":")
    valid = sep and host and ":" not in port and "/" not in host and port.isdigit() and 0 < int(port) < 65536
    if not valid:
        raise UserError(
            f"--master {master}: give HOST:PORT, one node's IPv4 address or host name and a port free on it, "
            "e.g. --master 10.0.0.1:8090"
        )
    return host, int(port)


@dataclass
class RunConfig:
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    task: dict = field(default_factory=dict)
    """The task's own settings (its dataclass fields, e.g. --crf for NER)."""
    resume: bool = False
    """Continue from OUTPUT/last (optimizer, schedule, random state and data position)."""
    overwrite: bool = False
    """Replace an existing output directory."""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)
