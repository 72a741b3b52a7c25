//! The official `openai` Python client against llama-server on the
//! embedded default model: chat (plain and streamed), completions, and
//! structured output, a `json_schema` response format made from a
//! `pydantic` model by the client's `parse()` and validated by pydantic.
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
    let out = Command::new(py)
        .arg("-c")
        .arg(SCRIPT)
        .arg(&s.base)
        .env("PYTHONPATH", &dir)
        .output()
        .expect("run python");
    let so = String::from_utf8_lossy(&out.stdout);
    let se = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "openai client script failed:\n{so}\n{se}"
    );
    eprintln!("{}", so.trim());
}
