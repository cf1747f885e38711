"""Intermediate-layer transfer (TinyBERT, ERNIE 3.0 Tiny): the student's hidden states and attention scores learn
the teacher's, layer by layer, with the teacher running beside the student in every training step.

Student hidden state m (0: the embedding output, m: the output of encoder layer m) learns teacher hidden state
g(m) = m * N // M (M student layers, N teacher layers: uniform, the last layer learns the last). A learned Linear
maps the student's width to the teacher's (none when they are equal); one projection serves every layer, as in
TinyBERT. Attention transfer compares the scores q.k / sqrt(d) of student layer m with those of teacher layer g(m),
head by head, before the softmax: TinyBERT found the unnormalised scores converge faster and end better than the
probabilities, whose small entries the softmax flattens. Unlike TinyBERT, each row of scores is centred over its
real keys first: the softmax ignores a constant added to a row, and a teacher may carry a large one (the test
suite's teacher adds about 20 to every score of its second layer), which uncentred squared errors make the student
copy at the expense of everything else. Both losses are mean squared errors over real tokens (padding left out),
averaged per window.
"""

from __future__ import annotations

import functools

from ernie_ft.errors import UserError

MODES = ("logits", "hidden", "hidden+attention")
"""What the student learns from the teacher: its logits (soft labels) always; 'hidden' adds the hidden states,
'hidden+attention' the attention scores too."""
PROJECTION = "distill_projection"
"""The name of the projection inside the student: trained and resumed with it, never saved in a model directory."""


def layer_map(student_layers: int, teacher_layers: int) -> list[int]:
    """The teacher hidden state each student hidden state learns: g(m) = m * N // M for m = 0 (embeddings) .. M."""
    return [m * teacher_layers // student_layers for m in range(student_layers + 1)]


class Taps:
    """What an ERNIE model's last forward pass computed, caught by forward hooks (whatever runs inside the layers:
    Paddle's, the fused CPU kernels, recomputation): the hidden states (the embedding output, then each encoder
    layer's output) and each layer's attention queries and keys. Nothing is computed again outside the forward
    pass, so each parameter takes part in the graph once, as data parallelism's gradient reduction requires.
    ``training_only``: record nothing while the model evaluates."""

    def __init__(self, model, training_only: bool):
        backbone = getattr(model, "ernie", None)
        if backbone is None or not hasattr(backbone, "encoder"):
            raise UserError(f"--transfer: {type(model).__name__} is not an ERNIE model (no ernie.encoder)")
        from ernie_ft.models.first_token import every_token

        every_token(model)  # the last layer's every token, not [CLS]'s alone
        self.model, self.training_only = model, training_only
        self.states, self.queries, self.keys = [], {}, {}
        self.layers = list(backbone.encoder.layers)
        self.pad_id = backbone.pad_token_id
        backbone.embeddings.register_forward_post_hook(self._start)
        for i, layer in enumerate(self.layers):
            layer.register_forward_post_hook(self._add)
            layer.self_attn.q_proj.register_forward_post_hook(functools.partial(self._keep, "queries", i))
            layer.self_attn.k_proj.register_forward_post_hook(functools.partial(self._keep, "keys", i))

    def _start(self, layer, inputs, output):
        recording = self.model.training or not self.training_only
        self.states, self.queries, self.keys = [output] if recording else [], {}, {}

    def _add(self, layer, inputs, output):
        if self.states:
            self.states.append(output[0] if isinstance(output, (tuple, list)) else output)

    def _keep(self, into: str, i: int, layer, inputs, output):
        if self.states:
            getattr(self, into)[i] = output

    def take(self) -> tuple[list, dict, dict]:
        """(hidden states, embeddings first, projected to the teacher's width where ``Transfer`` projects them;
        queries and keys by layer index) of the last forward pass, forgotten here (their graph is the caller's)."""
        taken, (self.states, self.queries, self.keys) = (self.states, self.queries, self.keys), ([], {}, {})
        if len(taken[0]) != len(self):
            raise RuntimeError(f"the forward pass recorded {len(taken[0])} hidden states, not {len(self)}")
        return taken

    def scores(self, queries: dict, keys: dict, i: int):
        """The unnormalised attention scores q.k / sqrt(head_dim) [batch, heads, length, length] of encoder layer
        ``i`` (what its attention computes before the mask and the softmax; no dropout acts before them)."""
        import paddle

        attention = self.layers[i].self_attn

        def heads(x):  # [batch, length, width] -> [batch, heads, length, head_dim]
            return x.reshape([0, 0, attention.num_heads, attention.head_dim]).transpose([0, 2, 1, 3])

        q = heads(queries[i].astype("float32") * (attention.head_dim**-0.5))
        return paddle.matmul(q, heads(keys[i].astype("float32")), transpose_y=True)

    def __len__(self) -> int:
        return len(self.layers) + 1

    @property
    def width(self) -> int:
        return int(self.model.config.hidden_size)

    @property
    def heads(self) -> int:
        return int(self.model.config.num_attention_heads)


def hidden_mse(student, teacher, mask):
    """The mean over windows of the mean over a window's real tokens (``mask`` [batch, length], 1 for a real
    token) of the mean squared difference over the width. Each window counts alike, as in the loss on the logits:
    data-parallel replicas, which average their batches' losses, then give the loss of their global batch."""
    per_token = (student.astype("float32") - teacher.astype("float32")).square().mean(axis=-1)
    return ((per_token * mask).sum(axis=1) / mask.sum(axis=1)).mean()


def centred(scores, mask):
    """``scores`` [batch, heads, length, length] less each row's mean over the real keys: the softmax ignores a
    constant added to a row, so two rows that differ by one give the same attention."""
    keys = mask.unsqueeze([1, 2])  # [batch, 1, 1, length]
    scores = scores.astype("float32")
    return scores - (scores * keys).sum(axis=-1, keepdim=True) / keys.sum(axis=-1, keepdim=True)


def attention_mse(student, teacher, mask):
    """The mean over windows of the mean over heads and pairs of real tokens (query and key) of the squared
    difference of the scores, each row centred (``centred``)."""
    pairs = mask.unsqueeze([1, 3]) * mask.unsqueeze([1, 2])  # [batch, 1, length, length]
    squared = (centred(student, mask) - centred(teacher, mask)).square() * pairs
    return (squared.sum(axis=[1, 2, 3]) / (pairs.sum(axis=[1, 2, 3]) * student.shape[1])).mean()


class Transfer:
    """The teacher beside a student in training: checks their shapes, adds the projection to the student
    (so the trainer's optimizer, checkpoints and resume take it) and gives the transfer losses of a step."""

    def __init__(self, student, teacher, mode: str):
        import paddle

        self.mode, self.teacher = mode, teacher
        self.teacher_ids = None
        """The teacher's token id of each student id (a tensor) when the student's vocabulary is a cut of its own."""
        self.student_taps, self.teacher_taps = Taps(student, training_only=True), Taps(teacher, training_only=False)
        s, t = self.student_taps, self.teacher_taps
        if mode == "hidden+attention" and s.heads != t.heads:
            raise UserError(
                f"--transfer hidden+attention: the student has {s.heads} attention heads and the teacher {t.heads}; "
                "attention scores are compared head by head, which needs as many heads on both sides: use "
                "--transfer hidden (hidden states only, any widths) or a student with the teacher's head count"
            )
        if len(s) > len(t):
            raise UserError(
                f"--transfer {mode}: the student has {len(s) - 1} layers and the teacher {len(t) - 1}; each student "
                "layer learns a teacher layer, so the student needs at most the teacher's depth"
            )
        self.map = layer_map(len(s) - 1, len(t) - 1)
        self.projection = None
        if s.width != t.width:
            self.projection = paddle.nn.Linear(s.width, t.width)
            student.add_sublayer(PROJECTION, self.projection)
            student.register_forward_post_hook(self._project)
            # PaddleNLP's save_pretrained leaves these out: best/ stays a plain classification checkpoint
            student._keys_to_ignore_on_save = [f"{PROJECTION}.weight", f"{PROJECTION}.bias"]

    def _project(self, model, inputs, logits):
        """The student's hidden states projected to the teacher's width, inside the student's forward pass, and
        its logits tied to them by a term of weight 0: data parallelism reduces the gradients of the parameters
        that the forward pass's output depends on, and would take the projection's for unused (reducing zeros
        before its own arrive)."""
        import paddle

        states = self.student_taps.states
        if not states:  # evaluating
            return None
        self.student_taps.states = paddle.unbind(self.projection(paddle.stack(states)), axis=0)
        if not isinstance(logits, paddle.Tensor):  # called for other outputs (return_dict=True): not by the trainer
            return None
        return logits + (self.student_taps.states[0].sum() * 0).astype(logits.dtype)

    def describe(self) -> str:
        s, t = self.student_taps, self.teacher_taps
        pairs = ", ".join(f"{m}->{g}" for m, g in enumerate(self.map))
        width = "no projection (equal widths)" if self.projection is None else f"a projection {s.width} -> {t.width}"
        parts = "hidden states and attention scores" if self.mode == "hidden+attention" else "hidden states"
        return (
            f"--transfer {self.mode}: {parts} of student layers -> teacher layers {pairs} (0: embeddings), "
            f"{width}; the teacher runs in every training step"
        )

    def teacher_forward(self, batch):
        """The teacher's logits for the batch (its hidden states recorded for ``losses``), without gradients."""
        import paddle

        from ernie_ft.models.modeling import forward

        with paddle.no_grad():
            return forward(self.teacher, teacher_batch(batch, self.teacher_ids))

    def losses(self, batch) -> dict:
        """{'hidden': the sum over mapped layers of the hidden states' MSE, and with attention 'attention': the
        sum over mapped encoder layers of the scores' MSE}, from the student's last forward pass and the
        teacher's (``teacher_forward``) on the same batch."""
        student, queries, keys = self.student_taps.take()
        teacher, teacher_queries, teacher_keys = self.teacher_taps.take()
        mask = (batch["input_ids"] != self.student_taps.pad_id).astype("float32")
        parts = {"hidden": sum(hidden_mse(student[m], teacher[g], mask) for m, g in enumerate(self.map))}
        if self.mode == "hidden+attention":
            parts["attention"] = sum(
                attention_mse(
                    self.student_taps.scores(queries, keys, m - 1),
                    self.teacher_taps.scores(teacher_queries, teacher_keys, g - 1),
                    mask,
                )
                for m, g in enumerate(self.map[1:], start=1)  # encoder layer m (from 1) outputs hidden state m
            )
        return parts


def load_teacher(directory: str):
    """The teacher's model from its checkpoint, for evaluation on the current device (fused CPU kernels)."""
    from ernie_ft.distill.teacher import teacher_model
    from ernie_ft.models.fast_layers import enable_fast_kernels
    from ernie_ft.training import checkpoint

    model = checkpoint.load_model(teacher_model(directory)).model
    enable_fast_kernels(model)
    model.eval()
    return model


def check_max_len(teacher, max_len: int | None) -> None:
    """Refuse windows longer than the teacher, which reads the student's windows, can take."""
    limit = int(teacher.config.max_position_embeddings)
    if max_len is not None and max_len > limit:
        raise UserError(
            f"--max-len {max_len}: the teacher reads the student's windows and takes at most {limit} "
            f"tokens; use --max-len {limit} or less"
        )


def _rules(pipeline) -> tuple:
    """A pipeline's settings that decide its tokens, besides the vocabulary (a jieba user dictionary changes words,
    not ids)."""
    extension = pipeline.extension
    keys = ("lowercase", "rules", "strip_accents", "tokenize_chinese_chars")  # the last three: newer pipelines
    return [getattr(pipeline, k, None) for k in keys], extension and (extension.digest, pipeline.exact_spans)


def same_token_ids(student, teacher) -> bool:
    """Whether two text pipelines give every text the same token ids: the same vocabulary, casing, tokenization
    rules and vocabulary extension."""
    return student.vocab == teacher.vocab and _rules(student) == _rules(teacher)


def check_pipeline(pipeline, teacher_dir: str, flag: str, why: str):
    """The teacher's token id of each of the student's (``vocab.teacher_ids``, a tensor) when the student's
    vocabulary is a cut of the teacher's with its rules (--student-vocab used), None when the ids are the same; else
    a UserError: the teacher reads the student's windows. ``flag`` and ``why`` open and explain the error."""
    from ernie_ft.distill.teacher import teacher_model
    from ernie_ft.distill.vocab import teacher_ids

    teacher = teacher_model(teacher_dir).pipeline()
    if same_token_ids(pipeline, teacher):
        return None
    cut = pipeline.extension is None and pipeline.vocab.keys() <= teacher.vocab.keys()
    if not (cut and _rules(pipeline) == _rules(teacher)):
        raise UserError(
            f"{flag}: the student's text pipeline (vocabulary {pipeline.vocab_file}, {pipeline.vocab_size} "
            f"tokens) gives other token ids than the teacher's ({teacher.vocab_size} tokens, its casing and rules): "
            f"{why}; give a scratch student --vocab {teacher.vocab_file} (the default), or a student model with the "
            "teacher's vocabulary"
        )
    import paddle

    return paddle.to_tensor(teacher_ids(pipeline, teacher))


def teacher_batch(batch: dict, ids) -> dict:
    """``batch`` as the teacher reads it: its token ids (``ids``: a tensor of the teacher's id of each student id,
    from ``check_pipeline``; None: the same ids)."""
    if ids is None:
        return batch
    import paddle

    student = batch["input_ids"]
    return {**batch, "input_ids": paddle.gather(ids, student.flatten()).reshape(student.shape)}
