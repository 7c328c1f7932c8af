"""The closed form's burst honours SGLang's --max-prefill-tokens as the simulation's admission
does (serving/admission.py): past the first prompt, one enters a step only if it fits the cap."""

from dataclasses import replace

from simulator.closed_form.steady_state import Traffic, Unit
from simulator.closed_form.waves import burst_steps


def _unit(budget: int, cap: int | None) -> Unit:
    def step(decode: float, prefill: float, seqs: float, offset: float) -> float:
        return 0.01  # not read by the step counts under test
    return replace(Unit(step, 256, budget, 10**6, True, True), max_prefill_tokens=cap)


def _prompts(tokens: float) -> Traffic:
    return Traffic(tokens, 128.0, tokens, 128.0, 0.0, 0.0, 1.0, tokens + 64.0, tokens + 64.0)


def test_without_a_cap_the_budget_sets_the_step() -> None:
    assert _unit(8192, None).burst_tokens_per_step(1024) == 8192


def test_cap_admits_the_whole_prompts_that_fit() -> None:
    # cap 1024 + 1500 = 2524 -> floor(2524 / 1024) = 2 whole prompts = 2048 tokens a step,
    # not the 8192-token budget (8 prompts).
    assert _unit(8192, 2524).burst_tokens_per_step(1024) == 2048


def test_a_prompt_above_the_cap_still_enters_alone() -> None:
    # 4096 > 2524: the first prompt always enters -> one prompt, 4096 tokens.
    assert _unit(8192, 2524).burst_tokens_per_step(4096) == 4096


def test_a_prompt_above_the_budget_is_chunked_to_it() -> None:
    assert _unit(8192, 9692).burst_tokens_per_step(8192 + 1) == 8192


def test_burst_of_eight_prompts_takes_four_capped_steps() -> None:
    # 8 x 1024 = 8192 tokens: one budget step uncapped; 2 prompts a step under the cap -> 4.
    assert burst_steps(_unit(8192, None), _prompts(1024), 8) == 1
    assert burst_steps(_unit(8192, 2524), _prompts(1024), 8) == 4
