"""The fine-tuning loop: its configuration, the order of the examples, evaluations, the mode it leaves."""

import pytest
import torch

from course_lib.finetuning import FineTuneConfig, fine_tune


@pytest.mark.parametrize("field, value", [("epochs", 0), ("epochs", -1.5), ("batch_size", 0), ("eval_every", 0)])
def test_bad_configs_name_the_field(field, value):
    with pytest.raises(ValueError, match=f"^{field} must be"):
        FineTuneConfig(**{field: value})


def test_fine_tuning_on_no_examples_is_refused(tiny_gpt):
    with pytest.raises(ValueError, match="at least one training example"):
        fine_tune(tiny_gpt(), 0, lambda indices: torch.tensor(0.0), FineTuneConfig(), lambda step: None)


def test_every_example_once_an_epoch_evaluations_on_schedule_and_eval_mode_after(tiny_gpt):
    model = tiny_gpt()
    x = torch.randint(0, 40, (10, 8), generator=torch.Generator().manual_seed(0))
    seen, modes, evaluated = [], [], []

    def batch_loss(indices):
        seen.extend(indices)
        modes.append(model.training)
        return model(x[indices]).logsumexp(-1).mean()

    config = FineTuneConfig(epochs=2, batch_size=4, eval_every=2, warmup_steps=0)
    seconds = fine_tune(model, 10, batch_loss, config, evaluated.append, progress=False)
    assert evaluated == [2, 4, 6] and len(seen) == 6 * 4  # 10 examples in batches of 4: 3 steps an epoch
    assert sorted(seen[:10]) == list(range(10))  # the first epoch holds every example once
    assert all(modes) and not model.training and seconds >= 0
