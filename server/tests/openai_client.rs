//! The official `openai` Python client against llama-server on the
//! embedded default model: chat (plain and streamed), completions, and
//! structured output, a `json_schema` response format made from a
//! `pydantic` model by the client's `parse()` and validated by pydantic.
//! And a tool-call round trip on Qwen 2.5's template (Hermes `<tool_call>`
//! tags, from tests/data/chat): with `tool_choice: "required"` the random
//! model must call the tool; the client gets `tool_calls`, sends the call
//! and its result back, and gets a text answer whose prompt holds both.
//! Skipped with the reason when the package cannot be installed.

mod common;

use std::process::Command;

use common::{python_with_openai, start};

const SCRIPT: &str = r#"
import sys
from typing import Annotated, List, Literal
import openai
from pydantic import BaseModel, Field

base = sys.argv[1]
c = openai.OpenAI(base_url=base + "/v1", api_key="none", timeout=120, max_retries=0)
model = c.models.list().data[0].id

# chat, plain and streamed: the same greedy answer
ch = c.chat.completions.create(model=model, messages=[{"role": "user", "content": "Hello"}], max_tokens=12, temperature=0)
assert ch.choices[0].message.role == "assistant" and ch.usage.completion_tokens == 12, ch
parts = [k.choices[0].delta.content or "" for k in c.chat.completions.create(
    model=model, messages=[{"role": "user", "content": "Hello"}], max_tokens=12, temperature=0, stream=True)]
assert len(parts) > 2 and "".join(parts) == ch.choices[0].message.content, (parts, ch)

# completions
r = c.completions.create(model=model, prompt="Once upon a time", max_tokens=8, temperature=0)
assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 8 and r.choices[0].text, r

# structured output from a pydantic model, validated by pydantic
class Pet(BaseModel):
    name: Annotated[str, Field(max_length=10)]
    kind: Literal["cat", "dog", "bird"]
    age: Annotated[int, Field(ge=0, le=30)]
    toys: Annotated[List[Annotated[str, Field(max_length=6)]], Field(max_length=3)]

parse = getattr(c.chat.completions, "parse", None) or c.beta.chat.completions.parse
for seed in range(5):
    p = parse(model=model, messages=[{"role": "user", "content": "Describe a pet as JSON."}],
              response_format=Pet, max_tokens=200, seed=seed, temperature=1.0)
    pet = p.choices[0].message.parsed
    assert isinstance(pet, Pet), p
    # the raw text is valid for pydantic on its own too
    Pet.model_validate_json(p.choices[0].message.content)
    print("pet", seed, p.choices[0].message.content)

# the same with the json_schema given by hand
s = c.chat.completions.create(model=model, messages=[{"role": "user", "content": "A number"}], max_tokens=40,
    response_format={"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "object",
        "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 9}}, "required": ["n"]}}})
class N(BaseModel):
    n: Annotated[int, Field(ge=1, le=9)]
N.model_validate_json(s.choices[0].message.content)

# an unusable schema is a 400 the client raises as BadRequestError
try:
    c.chat.completions.create(model=model, messages=[{"role": "user", "content": "x"}], max_tokens=4,
        response_format={"type": "json_schema", "json_schema": {"name": "bad", "schema": {"type": "hiccup"}}})
    raise SystemExit("no error for an invalid schema")
except openai.BadRequestError as e:
    assert "hiccup" in str(e), e
print("openai client ok")
"#;

const TOOL_SCRIPT: &str = r#"
import json, sys, urllib.request
import openai

base = sys.argv[1]
c = openai.OpenAI(base_url=base + "/v1", api_key="none", timeout=120, max_retries=0)
model = c.models.list().data[0].id
tools = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Tokyo"]}},
                   "required": ["city"]}}}]
messages = [{"role": "user", "content": "What is the weather in Paris?"}]

# tool_choice "required": the (random) model must call the tool
r = c.chat.completions.create(model=model, messages=messages, tools=tools, tool_choice="required",
                              parallel_tool_calls=False, max_tokens=200, temperature=0)
ch = r.choices[0]
# the grammar ends the generation after the one call
assert ch.finish_reason == "tool_calls" and r.usage.completion_tokens < 200, r
calls = ch.message.tool_calls
assert calls and len(calls) == 1 and calls[0].type == "function", r
call = calls[0]
assert call.function.name == "get_weather" and call.id, call
args = json.loads(call.function.arguments)
assert set(args) == {"city"} and args["city"] in ("Paris", "Tokyo"), args
print("tool call", call.function.name, args)

# the client sends the call and its result back
result = json.dumps({"city": args["city"], "temperature_c": 21, "sky": "clear"})
messages += [ch.message.model_dump(exclude_none=True),
             {"role": "tool", "tool_call_id": call.id, "content": result}]
# the template renders the call and the result in the prompt
req = urllib.request.Request(base + "/apply-template", data=json.dumps({"messages": messages, "tools": tools}).encode(),
                             headers={"Content-Type": "application/json"})
prompt = json.loads(urllib.request.urlopen(req, timeout=60).read())["prompt"]
assert "<tool_response>\n" + result + "\n</tool_response>" in prompt, prompt
assert '"name": "get_weather"' in prompt and prompt.endswith("<|im_start|>assistant\n"), prompt

# and the model answers in text
a = c.chat.completions.create(model=model, messages=messages, tools=tools, tool_choice="none",
                              max_tokens=16, temperature=0)
m = a.choices[0].message
assert m.role == "assistant" and not m.tool_calls and m.content, a
# whose prompt holds the call and the result: longer than the first turn's
first = c.chat.completions.create(model=model, messages=messages[:1], tools=tools, tool_choice="none",
                                  max_tokens=1, temperature=0)
assert a.usage.prompt_tokens > first.usage.prompt_tokens + 20, (a.usage, first.usage)
print("tool round trip ok:", repr(m.content))
"#;

/// Run `script` with the openai package against `s`; its stdout.
fn run_script(script: &str, s: &common::Server, py: &str, dir: &std::path::Path) -> String {
    let out = Command::new(py)
        .arg("-c")
        .arg(script)
        .arg(&s.base)
        .env("PYTHONPATH", dir)
        .output()
        .expect("run python");
    let so = String::from_utf8_lossy(&out.stdout);
    let se = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "openai client script failed:\n{so}\n{se}"
    );
    so.trim().to_string()
}

#[test]
fn openai_client_tool_call_round_trip() {
    let (py, dir) = match python_with_openai() {
        Ok(x) => x,
        Err(why) => {
            eprintln!("SKIPPED openai_client_tool_call_round_trip: {why}");
            return;
        }
    };
    let template = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/data/chat/Qwen-Qwen2.5-7B-Instruct.jinja"
    );
    let s = start(&["--jinja", "--chat-template-file", template]);
    eprintln!("{}", run_script(TOOL_SCRIPT, &s, py, &dir));
}

#[test]
fn openai_client_chat_completions_and_structured_output() {
    let (py, dir) = match python_with_openai() {
        Ok(x) => x,
        Err(why) => {
            eprintln!("SKIPPED openai_client_chat_completions_and_structured_output: {why}");
            return;
        }
    };
    let s = start(&[]);
    eprintln!("{}", run_script(SCRIPT, &s, py, &dir));
}
