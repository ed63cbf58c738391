"""Knowledge distillation for the Krony study's distilled baseline (the DistilGPT2 analogue): Hinton's loss and
the training task that applies it."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from lmstudy.lm_batches import LMTask


def distillation_loss(
    student_logits: torch.Tensor, teacher_logits: torch.Tensor, targets: torch.Tensor, alpha: float,
    temperature: float,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Hinton et al. (2015): ``alpha * KL(p_t^T || p_s^T) * T^2 + (1 - alpha) * CE(s, y)``, mean over tokens.

    Logits are ``(B, T, V)`` (or ``(N, V)``), targets ``(B, T)`` (or ``(N,)``); ``p^T = softmax(logits / T)``.
    The ``T^2`` keeps the KD gradients on the scale of the CE's as T changes (Hinton, Sec. 2). Returns the loss
    and its two terms, detached, for the training log.
    """
    vocab = student_logits.size(-1)
    student = student_logits.reshape(-1, vocab).float()  # (N, V); float32 softmax under autocast too
    teacher = teacher_logits.reshape(-1, vocab).float()  # (N, V)
    # KL(p_t || p_s) summed over the vocabulary, averaged over tokens ("batchmean" on (N, V)).
    kd = F.kl_div(F.log_softmax(student / temperature, dim=-1), F.log_softmax(teacher / temperature, dim=-1),
                  reduction="batchmean", log_target=True) * temperature**2
    ce = F.cross_entropy(student, targets.reshape(-1).long())
    return alpha * kd + (1 - alpha) * ce, {"kd": kd.detach(), "ce": ce.detach()}


@dataclass
class DistillTask(LMTask):
    """``LMTask`` whose training loss distils ``teacher`` into the model (``distillation_loss``).

    Batches and evaluation are ``LMTask``'s: validation (and so early stopping and ``best/``) is the student's
    plain cross-entropy. The teacher is frozen and kept in eval mode (no dropout); the loop never sees it.
    """

    teacher: torch.nn.Module | None = None
    alpha: float = 0.9
    temperature: float = 2.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.teacher is None:
            raise ValueError("DistillTask needs a teacher model")
        if not 0.0 <= self.alpha <= 1.0 or self.temperature <= 0:
            raise ValueError(f"need 0 <= alpha <= 1 and temperature > 0, got {self.alpha}, {self.temperature}")
        self.teacher.eval().requires_grad_(False)

    def loss(self, model, batch):
        x, y = batch
        student_logits = model(input_ids=x).logits  # (B, T, V)
        with torch.no_grad():
            teacher_logits = self.teacher.to(x.device)(input_ids=x).logits  # (B, T, V); .to: no-op after the first
        return distillation_loss(student_logits, teacher_logits, y, self.alpha, self.temperature)
