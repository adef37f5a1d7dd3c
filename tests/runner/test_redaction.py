"""The one redaction step: every credential of a run is found where it is given and taken out in every form."""

from __future__ import annotations

import base64
import json
import shlex

import pytest
import yaml

from ifgym.runner import redaction
from ifgym.runner.redaction import (
    public,
    public_args,
    public_yaml_file,
    redact,
    redact_json_line,
    remember_config,
    remember_overrides,
    resume_variables,
)

USER, PASSWORD, KEY, HEADER, SIG = "canary-u-11", "canary-pw-22", "canary-key-33", "canary-hdr-44", "canary-sig-55"
BASIC = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    """Each test starts knowing no credential, with the key in a variable whose name says nothing of a key."""
    monkeypatch.setattr(redaction, "_given", set())
    monkeypatch.setenv("LLM_CRED", KEY)


OVERRIDES = [
    "-m",
    f"policy.llm.base_url=http://{USER}:{PASSWORD}@127.0.0.1:9/v1,http://127.0.0.1:9/v1",
    "policy.llm.api_key_env=LLM_CRED",
    f"+policy.llm.headers={{X-Gateway-Key:{HEADER}}}",
    f"judge.llm.base_url='http://127.0.0.1:9/v1?sig={SIG}'",
    "env.patience=2,3",
]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Hydra's launch line of a sweep job: `:` escaped inside the URL
        (
            rf"#0 : policy.llm.base_url=http\://{USER}\:{PASSWORD}@127.0.0.1\:9/v1",
            r"#0 : policy.llm.base_url=http\://[redacted]@127.0.0.1\:9/v1",
        ),
        # an echoed Basic header, a Bearer key from a variable named LLM_CRED, a header value
        (f"Authorization: Basic {BASIC}", "Authorization: Basic [redacted]"),
        (f"got key {KEY} and x-gateway-key={HEADER}", "got key [redacted] and x-gateway-key=[redacted]"),
        # the pair decoded, and each part on its own
        (f"user:password {USER}:{PASSWORD}", "user:password [redacted]"),
        (f"user {USER}", "user [redacted]"),
        # a query value, and a JSON-escaped form of the escaped URL (run.json holding Hydra's override)
        (f"?sig={SIG}", "?sig=[redacted]"),
        (json.dumps(rf"http\://{USER}\:{PASSWORD}@h"), json.dumps(r"http\://[redacted]@h")),
        # key-shaped text is redacted whether known or not; ordinary words are not
        ("key sk-abcdefgh12345", "key [redacted]"),
        ("task-structflow and disk-usage stay", "task-structflow and disk-usage stay"),
    ],
)
def test_every_form_of_every_credential_given_in_overrides_is_redacted(text, expected):
    remember_overrides(OVERRIDES)
    assert redact(text) == expected


def test_a_config_gives_its_headers_keys_and_url_credentials():
    remember_config(
        {
            "policy": {"llm": {"api_key_env": "LLM_CRED", "headers": {"X-Gateway-Key": HEADER}}},
            "judge": {"llm": {"base_url": f"https://{USER}:{PASSWORD}@host/v1", "api_key_env": "UNSET_VARIABLE"}},
        }
    )
    assert redact(f"{KEY} {HEADER} {USER} {PASSWORD} {BASIC}") == " ".join(["[redacted]"] * 5)


def test_short_values_are_hidden_where_given_but_not_searched_in_free_text():
    remember_overrides(["+policy.llm.headers={X-Trace:on}"])
    assert redact("turn on the light") == "turn on the light"
    assert public({"headers": {"X-Trace": "on"}}) == {"headers": {"X-Trace": "<hidden>"}}


def test_public_drops_secret_keys_hides_headers_and_cuts_urls():
    remember_overrides(OVERRIDES)
    config = {
        "llm": {"base_url": f"http://{USER}:{PASSWORD}@h:1/v1?sig={SIG}", "api_key": "x", "headers": {"A": HEADER}},
        "overrides": [f"+policy.llm.headers.X-Key={HEADER}", rf"a=http\://{USER}\:{PASSWORD}@h\:1/v1"],
    }
    assert public(config) == {
        "llm": {"base_url": "http://h:1/v1", "headers": {"A": "<hidden>"}},
        "overrides": ["+policy.llm.headers.X-Key=<hidden>", r"a=http\://h\:1/v1"],
    }


def test_a_json_line_stays_json_when_a_credential_follows_an_escape():
    # the credential `n…` matches the text of the escape `\n` + the rest: cutting the text would break the JSON;
    # the values are redacted instead, where the credential is not (a newline is not an `n`)
    remember_overrides([f"+policy.llm.headers={{A:n{HEADER}}}"])
    line = json.dumps({"reason": f"echo: \n{HEADER}", "n": 1, "also": f"n{HEADER}"})
    assert json.loads(redact_json_line(line)) == {"reason": f"echo: \n{HEADER}", "n": 1, "also": "[redacted]"}
    assert redact_json_line('{"a": "nothing here"}') == '{"a": "nothing here"}'


def test_the_command_names_variables_for_the_credentials_it_cannot_carry():
    argv = ["ifgym", "eval", *OVERRIDES[1:], "+policy.light_llm.headers.Authorization=${oc.env:MY_TOKEN}"]
    args = public_args(argv)
    assert (
        args[2]
        == "policy.llm.base_url=http://${oc.env:IFGYM_POLICY_LLM_BASE_URL_USERINFO}@127.0.0.1:9/v1,http://127.0.0.1:9/v1"
    )
    assert args[4] == "+policy.llm.headers={X-Gateway-Key:${oc.env:IFGYM_POLICY_LLM_HEADER_X_GATEWAY_KEY}}"
    assert args[5] == "judge.llm.base_url='http://127.0.0.1:9/v1?sig=${oc.env:IFGYM_JUDGE_LLM_BASE_URL_SIG}'"
    assert args[-1] == argv[-1]  # an interpolation the user gave carries no credential: kept as typed
    assert resume_variables(argv) == {
        "IFGYM_POLICY_LLM_BASE_URL_USERINFO": "user:password of policy.llm.base_url",
        "IFGYM_POLICY_LLM_HEADER_X_GATEWAY_KEY": "the value of header X-Gateway-Key of policy.llm",
        "IFGYM_JUDGE_LLM_BASE_URL_SIG": "the value of query parameter sig of judge.llm.base_url",
    }
    assert not any(c in shlex.join(args) for c in (USER, PASSWORD, HEADER, SIG, "<hidden>"))


def test_the_commands_overrides_parse_and_resolve_to_the_credentials(monkeypatch):
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    args = public_args([OVERRIDES[3], "policy.llm.base_url=http://u:p@h:1/v1"])
    monkeypatch.setenv("IFGYM_POLICY_LLM_HEADER_X_GATEWAY_KEY", HEADER)
    monkeypatch.setenv("IFGYM_POLICY_LLM_BASE_URL_USERINFO", "u:p")
    values = [OverridesParser.create().parse_override(a).value() for a in args]
    resolved = OmegaConf.to_container(OmegaConf.create({"h": values[0], "u": values[1]}), resolve=True)
    assert resolved == {"h": {"X-Gateway-Key": HEADER}, "u": "http://u:p@h:1/v1"}


def test_a_saved_yaml_file_is_rewritten_public(tmp_path):
    remember_overrides(OVERRIDES)
    path = tmp_path / "multirun.yaml"
    path.write_text(yaml.safe_dump({"hydra": {"overrides": {"task": OVERRIDES[1:]}}}))
    public_yaml_file(path)
    text = path.read_text()
    assert not any(c in text for c in (USER, PASSWORD, HEADER, SIG)) and "X-Gateway-Key" not in text
    assert "+policy.llm.headers=<hidden>" in text


@pytest.mark.parametrize(
    "written",
    [
        "p@ss:w=rd,1 (a, b)",  # as given
        r"p@ss\:w\=rd\,1\ \(a\,\ b\)",  # escaped by Hydra, as in a sweep job's overrides
        "p%40ss%3Aw%3Drd%2C1%20%28a%2C%20b%29",  # URL-encoded
        "p%40ss%3Aw%3Drd%2C1+%28a%2C+b%29",  # form-encoded
        json.dumps(r"p@ss\:w\=rd\,1\ \(a\,\ b\)")[1:-1],  # Hydra's escape inside a JSON file (run.json)
    ],
)
def test_a_credential_with_special_characters_is_found_in_each_written_form(written):
    remember_overrides(["+policy.llm.headers={X-Key:'p@ss:w=rd,1 (a, b)'}"])
    assert redact(f"<{written}>") == "<[redacted]>"
