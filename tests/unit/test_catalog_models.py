

def test_a_directory_named_as_a_renamed_repository_takes_the_config_it_has():
    # the Hub renamed meta-llama/Meta-Llama-3.1-8B-Instruct to Llama-3.1-8B-Instruct (same config.json); operators still
    # download into /models/Meta-Llama-3.1-8B-Instruct (a public start-up log of vLLM 0.15.1 serves such a path)
    from kvdoctor.catalog.models import lookup_model, model_directory_note

    path = "/home/user/models/Meta-Llama-3.1-8B-Instruct"
    shape = lookup_model(path)
    assert shape.name == "meta-llama/Llama-3.1-8B-Instruct"
    note = model_directory_note(path, shape)
    assert "named as Meta-Llama-3.1-8B-Instruct, whose config is the catalog's meta-llama/Llama-3.1-8B-Instruct (a " \
           "renamed repository, or a sibling" in note
    # the catalog's own name keeps the plain note
    assert "named as the catalog's Qwen/Qwen3-8B" in model_directory_note("/models/Qwen3-8B", lookup_model("/models/Qwen3-8B"))
