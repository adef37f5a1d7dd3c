"""GraphIF's long-dialogue evaluation sets (made-up files in their format): reading and replay.

The format is described in ../shared/data/graphif/FORMAT.md; GraphIF's real files carry no
licence, so these dialogues are invented. Both forms of `check_list` / `constraint_type` occur:
a JSON list, and a string holding a Python list literal (quotes of either kind, an escaped newline).
"""

from __future__ import annotations

import json
import re

import gymnasium as gym
import pytest

import ifgym  # noqa: F401
from ifgym.errors import DataFormatError
from ifgym.llm import CannedClient
from ifgym.rewards.structflow.metrics import dialogue_metrics, summarize
from ifgym.simulators.structflow import load_dataset

STORY = "Here is a story. A fox found a bell in the snow and rang it until the village woke."

# StructFlowBench-derived style: Instruction, Global, and StructFlowBench's structural relations.
SFB_STYLE = {
    "id": 1,
    "conv": [
        {
            "user": STORY + " Retell it in under 50 words.",
            "sys": "A fox rang a bell it found in the snow and woke the village.",
            "id": 0,
            "check_list": ["Is the response under 50 words?"],
            "constraint_type": ["Instruction"],
        },
        {
            "user": "Now tell it from the bell's side, and never use the word 'dragon' from here on.",
            "sys": "I lay cold in the snow until a fox found me.",
            "id": "1",
            "check_list": '[\'Does the response avoid the word "dragon"?\', "Does it retell Round 0\'s story?"]',
            "constraint_type": "['Global', \"follow-up\"]",
        },
        {
            "user": "Sum up everything so far.",
            "sys": "A fox woke a village with a bell; the bell remembers.",
            "id": 2,
            "check_list": [
                "Does the response summarize the dialogue content from Round 0 to Round 1?",
                "Does the response avoid the word 'dragon'?\nCheck every sentence.",
            ],
            "constraint_type": ["summary", "Global"],
        },
    ],
}
# MT-Eval-derived style: lower-case instruction, Global, modify and anchored.
MTEVAL_STYLE = {
    "id": 2,
    "conv": [
        {
            "user": "List three winter fruits.",
            "sys": "Oranges, pomegranates, persimmons.",
            "id": 0,
            "check_list": "['Does the response list exactly three fruits?']",
            "constraint_type": "['instruction']",
        },
        {
            "user": "Replace the second fruit with a berry, and answer in lowercase from now on.",
            "sys": "oranges, cranberries, persimmons.",
            "id": 1,
            "check_list": ["Does the response replace the second fruit with a berry?", "Is the response lowercase?"],
            "constraint_type": ["modify", "Global"],
        },
        {
            "user": "Which of them did I first ask about?",
            "sys": "you first asked about oranges, pomegranates and persimmons.",
            "id": "2",
            "check_list": "['Does the response name the fruits of the first answer?', 'Is it one sentence?', "
            "'Is the response lowercase?']",
            "constraint_type": "['anchored', 'instruction', 'Global']",
        },
    ],
}


def write(tmp_path, *records, name="made_up_graphif.jsonl"):
    path = tmp_path / name
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n\n", encoding="utf-8")  # a blank last line
    return path


def test_both_forms_load_and_every_item_keeps_its_type(tmp_path):
    dialogues = load_dataset(write(tmp_path, SFB_STYLE, MTEVAL_STYLE))
    assert [d.id for d in dialogues] == ["graphif-1", "graphif-2"]
    d1, d2 = dialogues
    assert [[i.type for i in t.checklist] for t in d1.turns] == [
        ["Instruction"],
        ["Global", "follow-up"],
        ["summary", "Global"],
    ]
    assert [[i.type for i in t.checklist] for t in d2.turns] == [
        ["instruction"],
        ["modify", "Global"],
        ["anchored", "instruction", "Global"],
    ]
    # the string form keeps both kinds of quotes; the escaped newline stays inside its item
    assert d1.turns[1].checklist[0].question == 'Does the response avoid the word "dragon"?'
    assert d1.turns[1].checklist[1].question == "Does it retell Round 0's story?"
    assert "\n" in d1.turns[2].checklist[1].question
    # structural types and Global (inter-turn, as GraphIF counts global constraints) weigh 2;
    # Instruction/instruction weigh 1, intra-turn
    kinds = {(i.type, i.kind, i.weight) for d in dialogues for t in d.turns for i in t.checklist}
    assert kinds == {
        ("Instruction", "intra", 1.0),
        ("instruction", "intra", 1.0),
        ("Global", "structural", 2.0),
        ("follow-up", "structural", 2.0),
        ("summary", "structural", 2.0),
        ("modify", "structural", 2.0),
        ("anchored", "structural", 2.0),
    }
    assert [t.answer for t in d1.turns] == [t["sys"] for t in SFB_STYLE["conv"]]  # golden answers from `sys`
    assert d1.meta["turn_ids"] == [0, 1, 2] and d2.meta["format"] == "graphif"  # "1" and 1 both read as 1
    assert [d1.spec(k).meta["relation"] for k in range(3)] == [None, "follow-up", "summary"]
    assert d2.spec(2).meta["relation"] == "anchored" and d1.task_name == "made_up_graphif"


def judge_by_rounds(messages):
    """The canned judge: No to every question that names a Round, Yes to the rest."""
    questions = re.findall(r"<item (\d+)>(.*?)</item>", messages[-1]["content"], re.DOTALL)
    results = [{"item": int(n), "judgement": "No" if "Round" in q else "Yes"} for n, q in questions]
    return json.dumps({"results": results})


def test_replay_with_golden_history_and_metrics_per_dialogue_and_type(tmp_path):
    path = write(tmp_path, SFB_STYLE, MTEVAL_STYLE)
    judge = CannedClient(judge_by_rounds, role="judge", model="canned-judge")
    env = gym.make("ifgym/StructFlow-v0", dataset=str(path), judge="llm", judge_llm=judge)
    episodes = []
    for seed in range(2):
        obs, info = env.reset(seed=seed)
        done = False
        while not done:
            obs, _, terminated, truncated, info = env.step("my own reply")
            done = terminated or truncated
            if not done:  # golden context: the history holds `sys`, not the policy's reply
                assert obs[-2]["role"] == "assistant" and obs[-2]["content"] != "my own reply"
        episodes.append(env.unwrapped.episode)
    assert [m["content"] for m in obs if m["role"] == "assistant"] == [t["sys"] for t in MTEVAL_STYLE["conv"]]
    per_dialogue = dialogue_metrics(episodes)
    # graphif-1: t0 [yes]; t1 [Global yes, follow-up no (names Round 0)]; t2 [summary no, Global yes]
    # CSR (1 + 1/2 + 1/2)/3, ISR 1/3, WCSR (1 + 2/4 + 2/4)/3 with Global and structural weight 2, DRFR 3/5
    assert per_dialogue["graphif-1"] == pytest.approx({"CSR": 2 / 3, "ISR": 1 / 3, "WCSR": 2 / 3, "DRFR": 3 / 5})
    assert per_dialogue["graphif-2"] == pytest.approx({"CSR": 1.0, "ISR": 1.0, "WCSR": 1.0, "DRFR": 1.0})
    s = summarize(episodes)
    # per type: Global 4 of 4, follow-up 0 of 1, summary 0 of 1; the two spellings of instruction apart
    assert s["pass_rate/Global"] == 1.0 and s["pass_rate/follow-up"] == 0.0 and s["pass_rate/summary"] == 0.0
    assert s["pass_rate/Instruction"] == 1.0 and s["pass_rate/instruction"] == 1.0
    assert (s["type/Global/CSR"], s["type/Global/ISR"], s["type/follow-up/ISR"]) == (1.0, 1.0, 0.0)
    # 11 items (5 + 6), 9 yes: DRFR 9/11. Weights 9 + 10 (4 structural and 4 Global items weigh 2);
    # satisfied weight 5 (graphif-1: Instruction, Global, Global) + 10 (all of graphif-2): WCSR_pooled 15/19
    assert s["items"] == 11 and s["DRFR"] == pytest.approx(9 / 11) and s["WCSR_pooled"] == pytest.approx(15 / 19)
    # the per-turn mean: graphif-1's 1, 1/2, 1/2 and graphif-2's three 1s
    assert s["WCSR"] == pytest.approx((1 + 0.5 + 0.5 + 3) / 6)


def test_the_judge_names_the_turns_as_graphifs_questions_do(tmp_path):
    """Its questions say "Round 0" for the first turn: the judge's history and request say so too."""
    prompts = []

    def judge(messages):
        prompts.append(messages[-1]["content"])
        return judge_by_rounds(messages)

    env = gym.make(
        "ifgym/StructFlow-v0",
        dataset=str(write(tmp_path, SFB_STYLE)),
        judge="llm",
        judge_llm=CannedClient(judge, role="judge"),
        judge_rule_items=True,
    )
    env.reset(seed=0)
    env.step("A fox woke the village.")
    env.step("I am the bell.")
    assert "The user's current request (Round 0):" in prompts[0]
    assert f"[Round 0] User: {STORY}" in prompts[1] and "The user's current request (Round 1):" in prompts[1]
    assert "[c1]" not in prompts[1]
    # the reader marks GraphIF's turns; StructFlowBench's own keep its names (c1, c2, ...)
    assert load_dataset(write(tmp_path, SFB_STYLE))[0].spec(1).meta["turn_names"] == "rounds"
    assert "turn_names" not in load_dataset("structflowbench")[0].spec(1).meta


def test_a_line_without_an_id_is_numbered_by_its_place_from_0(tmp_path):
    """The released mteval_graphif.jsonl has no dialogue ids."""
    no_id = {k: v for k, v in MTEVAL_STYLE.items() if k != "id"}
    assert [d.id for d in load_dataset(write(tmp_path, no_id, SFB_STYLE))] == ["graphif-0", "graphif-1"]


@pytest.mark.parametrize(
    ("mutate", "fragment"),
    [
        (lambda r: r["conv"][1].update(constraint_type="['Global']"), "2 check_list questions but 1 constraint_type"),
        (lambda r: r["conv"][0].update(constraint_type=["Instructions"]), "Did you mean 'Instruction'"),
        (lambda r: r["conv"][0].update(check_list="['unclosed"), "not a Python list literal"),
        (lambda r: r["conv"][0].update(check_list="[1, 2]"), "list of strings"),
        (lambda r: r["conv"][0].pop("sys"), "missing field 'sys'"),
        (lambda r: r["conv"][0].update(id="first"), "field 'id'"),
        (lambda r: r.update(conv=[]), "field 'conv'"),
    ],
)
def test_bad_lines_name_the_line_turn_and_field(tmp_path, mutate, fragment):
    record = json.loads(json.dumps(SFB_STYLE))
    mutate(record)
    with pytest.raises(DataFormatError, match=re.escape(fragment)) as info:
        load_dataset(write(tmp_path, MTEVAL_STYLE, record))
    assert "line 2" in str(info.value)


def test_repeated_ids_and_unknown_formats_are_refused(tmp_path):
    with pytest.raises(DataFormatError, match="ids repeat"):
        load_dataset(write(tmp_path, SFB_STYLE, SFB_STYLE))
    other = tmp_path / "other.jsonl"
    other.write_text('{"turns": []}\n{"turns": []}\n', encoding="utf-8")
    with pytest.raises(DataFormatError, match="neither StructFlowBench's JSON"):
        load_dataset(other)
