//! Imported files (`@parts/persona.md` in a block file) through the admin
//! API: listed under their includer in the effective prompt and in a
//! layer's sources, read-only; a save whose import cannot be read is a 400
//! with nothing written, and a file on disk whose import cannot be read
//! makes the prompt a 409 naming it.

use serde_json::json;
use vak_core::prompts::sha256_hex;

use super::Env;

#[test]
fn imported_files_are_shown_under_their_includer_and_refusals_are_named() {
    let env = Env::new();
    let identity = env.project_file("identity.md");
    let persona = env.project_file("parts/persona.md");
    std::fs::create_dir_all(env.project_file("parts")).expect("dir");
    std::fs::write(&persona, "You speak Hindi.\n").expect("write");
    std::fs::write(&identity, "You are Vak.\n@parts/persona.md\n").expect("write");

    let prompt = env.get("/api/prompt").expect_ok();
    assert!(
        prompt["prefix"]
            .as_str()
            .expect("prefix")
            .contains("You are Vak.\nYou speak Hindi."),
        "{prompt}"
    );
    let block = prompt["blocks"]
        .as_array()
        .expect("blocks")
        .iter()
        .find(|b| b["block"] == "identity")
        .expect("identity")
        .clone();
    assert_eq!(
        block["imports"],
        json!([{"source": persona.as_str(), "by": identity.as_str()}])
    );

    let layer = env.get("/api/layers?scope=project").expect_ok();
    let sources = layer["blocks"]
        .as_array()
        .expect("blocks")
        .iter()
        .find(|b| b["block"] == "identity")
        .expect("identity")["effective"]["sources"]
        .clone();
    assert_eq!(
        sources[0]["imports"],
        json!([{"source": persona.as_str(), "text": "You speak Hindi."}])
    );

    let before = std::fs::read_to_string(&identity).expect("read");
    let error = env
        .put(
            "/api/layers/identity?scope=project",
            &json!({"text": "You are Vak.\n@gone.md\n", "if_digest": sha256_hex(&before)}),
        )
        .expect_error(400);
    assert!(
        error.contains("gone.md") && error.contains("does not exist"),
        "{error}"
    );
    assert_eq!(std::fs::read_to_string(&identity).expect("read"), before);

    std::fs::write(&identity, "You are Vak.\n@../../secret.md\n").expect("write");
    let error = env.get("/api/prompt").expect_error(409);
    assert!(
        error.contains("@../../secret.md") && error.contains("line 2"),
        "{error}"
    );
}
