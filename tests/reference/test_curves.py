"""The batch figure's data: a dense version of the note's table that passes through its rows."""

import pytest
from capsim.reference.curves import batch_curves
from capsim.errors import CapsimError
from capsim.reference.tables import TableSetup, batch_table


@pytest.mark.parametrize("setup", [TableSetup(), TableSetup(context_tokens=8192), TableSetup(gpu="h100", model="llama-3.1-8b")])
def test_curve_passes_through_the_tables_rows(setup):
    curves = batch_curves(setup, setup.context_tokens)
    traffic = curves["traffic"].unique()[-1]
    mine = curves[curves["traffic"] == traffic].set_index("batch")
    for batch, pass_ms, tokens_per_s, _, bound in batch_table(setup).rows:
        assert round(mine.loc[batch, "pass_time_ms"], 3) == pass_ms
        assert round(mine.loc[batch, "total_tokens_per_s"], 1) == tokens_per_s
        assert mine.loc[batch, "bound"] == bound


def test_the_notes_numbers_and_crossover():
    curves = batch_curves()
    assert list(curves["traffic"].unique()) == ["weights only"] and curves["batch"].max() == 64
    row = curves.set_index("batch").loc[32]
    assert round(row["pass_time_ms"], 3) == 20.945 and row["bound"] == "compute"
    assert curves["crossover_batch"].iloc[0] == pytest.approx(25.77, abs=0.01)


def test_context_adds_a_second_curve_and_an_earlier_crossover():
    curves = batch_curves(context_tokens=8192)
    first, second = (g for _, g in curves.groupby("traffic", sort=False))
    assert second["traffic"].iloc[0] == "weights + KV at 8,192 tokens of context"
    assert (second["pass_time_ms"].to_numpy() >= first["pass_time_ms"].to_numpy()).all()
    assert second["crossover_batch"].iloc[0] < first["crossover_batch"].iloc[0]


def test_bad_context():
    with pytest.raises(CapsimError, match="--context"):
        batch_curves(context_tokens=-1)
