"""Model cards, datasheets, and the compute arithmetic of chapter 12."""

import pytest

from course_lib.cards import GPT3_TRAINING_FLOPS, datasheet, energy_kwh, model_card, training_flops
from course_lib.model import GPTConfig

SECTIONS = {
    "intended use": "Teaching.",
    "training data": "Generated.",
    "evaluation": {"accuracy": "0.50"},
    "limitations": ["Invents answers.", "English only."],
}


def test_a_model_card_holds_config_training_and_every_section(tmp_path):
    config = GPTConfig(vocab_size=10, n_layers=1, n_heads=1, d_model=4)
    text = model_card("tiny", summary="A tiny model.", config=config, training={"steps": 3}, sections=SECTIONS)
    assert text.startswith("# Model card: tiny\n\nA tiny model.\n")
    assert "| d_model | 4 |" in text and "| steps | 3 |" in text and "n_kv_heads" not in text  # None left out
    assert "## Limitations\n\n- Invents answers.\n- English only." in text and "| accuracy | 0.50 |" in text
    assert not list(tmp_path.iterdir())  # nothing written without a path
    path = tmp_path / "card.md"
    assert model_card("tiny", summary="", config={"a": 1}, training={}, sections=SECTIONS, path=path) == (
        path.read_text(encoding="utf-8")
    )


def test_cards_and_datasheets_without_their_limitations_are_refused():
    with pytest.raises(ValueError, match=r"missing \['limitations'\]"):
        model_card(
            "x", summary="", config={}, training={}, sections={k: v for k, v in SECTIONS.items() if k != "limitations"}
        )
    with pytest.raises(ValueError, match=r"missing \['collection', 'uses', 'limitations'\]"):
        datasheet("x", counts={}, sha256="0", sections={"motivation": "m", "composition": "c"})


def test_a_datasheet_records_counts_and_hash():
    sections = dict.fromkeys(("motivation", "composition", "collection", "uses", "limitations"), "text")
    text = datasheet("docs", counts={"train": 3}, sha256="ab" * 32, sections=sections)
    assert "| train | 3 |" in text and f"| SHA-256 | `{'ab' * 32}` |" in text and "## Uses\n\ntext" in text


def test_training_compute_and_energy():
    assert training_flops(1_000_000, 2_000_000) == 1.2e13  # 6 N D
    assert training_flops(175e9, 300e9) == pytest.approx(GPT3_TRAINING_FLOPS, rel=0.01)  # GPT-3: 300 B tokens
    assert energy_kwh(3.6e15, 1e12, 1000.0) == pytest.approx(1.0)  # 3,600 s at 1 kW
    with pytest.raises(ValueError, match="positive"):
        training_flops(0, 10)
    with pytest.raises(ValueError, match="positive"):
        energy_kwh(1.0, 0.0, 10.0)
