"""The probe's `hf` backend on a tiny random-weight DeepSeek-V4 saved as a Hugging Face directory."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the hf backend needs torch")
transformers = pytest.importorskip("transformers", reason="the hf backend needs transformers")

import weakspots  # noqa: E402
from weakspots.cli import main  # noqa: E402
from weakspots.probe.design import ProbeConfig, text_trials  # noqa: E402
from weakspots.probe.tokenizers import ByteTokenizer  # noqa: E402

TINY = dict(hidden_size=32, moe_intermediate_size=16, num_hidden_layers=2, num_attention_heads=2,
            num_key_value_heads=1, head_dim=16, q_lora_rank=16, num_experts_per_tok=2,
            n_routed_experts=4, n_shared_experts=1, o_groups=1, o_lora_rank=16, index_n_heads=2,
            index_head_dim=16, index_topk=8, sliding_window=16, num_nextn_predict_layers=0,
            hc_mult=2, max_position_embeddings=1024, qk_rope_head_dim=8)  # fmt: skip


def _save(path, vocab: int):
    if not hasattr(transformers, "DeepseekV4ForCausalLM"):
        pytest.skip(f"transformers {transformers.__version__} has no DeepseekV4ForCausalLM")
    torch.manual_seed(0)
    config = transformers.DeepseekV4Config(vocab_size=vocab, **TINY)
    transformers.DeepseekV4ForCausalLM(config).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return _save(tmp_path_factory.mktemp("dsv4"), vocab=260)


def test_a_tiny_deepseek_v4_is_probed_and_answers_as_its_own_greedy_decoding(tiny, tmp_path):
    fields = dict(backend="hf", model=str(tiny), tokenizer="byte", stride=4, context=256,
                  trials=1, digits=3)  # fmt: skip
    report = weakspots.probe(**fields, store=str(tmp_path / "s"))
    assert report["trials"] == 4 and report["failed"] == 0 and report["backend"] == "hf"
    table = weakspots.load(tmp_path / "s")
    # the stored continuation is the model's argmax, decoded byte by byte (computed here apart)
    model = transformers.AutoModelForCausalLM.from_pretrained(str(tiny)).eval()
    trial = text_trials(ProbeConfig(**fields), ByteTokenizer())[0]
    ids = torch.tensor([list(trial.prompt)])
    with torch.no_grad():
        for _ in range(trial.max_tokens):
            ids = torch.cat([ids, model(ids).logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    expected = ByteTokenizer().decode(ids[0, len(trial.prompt) :].tolist())
    row = table[(table["needle_shift"] == 0) & (table["group"] == 0)].iloc[0]
    assert row["continuation"] == expected


def test_a_byte_tokenizer_on_a_smaller_vocabulary_is_refused(tmp_path, capsys):
    small = _save(tmp_path / "small", vocab=200)
    capsys.readouterr()
    code = main(["probe", "--backend", "hf", "--model", str(small), "--tokenizer", "byte",
                 "--context", "256", "--quiet"])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err
    assert err.startswith("weakspots probe: error: --tokenizer: byte does not match")


@pytest.mark.parametrize("digits_seen", [False, True])
def test_a_hugging_face_tokenizer_places_the_answer_exactly(tmp_path, digits_seen):
    """A byte-level BPE trained here: with digits unseen, ' 12345' starts with a space token
    of its own (not the answer); with ' 1'... seen, the space joins the first digit."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from weakspots.probe.design import FACT_QUESTION, FILLER, PASSKEY, PASSKEY_QUESTION
    from weakspots.probe.tokenizers import HFTokenizer

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    corpus = list(FILLER) * 20 + [p.format(digits="") for p in PASSKEY] * 20
    corpus += [PASSKEY_QUESTION, FACT_QUESTION.format(name="amber")] * 20
    if digits_seen:
        corpus += [f" {d}" for d in range(10)] * 50
    bpe.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))  # fmt: skip
    transformers.PreTrainedTokenizerFast(tokenizer_object=bpe).save_pretrained(tmp_path / "tok")
    tokenizer = HFTokenizer(tmp_path / "tok")
    space = tokenizer.encode(" ")
    assert (tokenizer.encode(" 7")[: len(space)] == space) != digits_seen
    config = ProbeConfig(url="u", model="m", tokenizer=str(tmp_path / "tok"), stride=(4,),
                         context=(256,), trials=3)  # fmt: skip
    for trial in text_trials(config, tokenizer):
        answer = tokenizer.decode(list(trial.prompt[trial.needle_index :][: len(trial.answer_ids)]))
        assert answer.strip() == trial.answer
        assert tokenizer.decode([trial.prompt[trial.needle_index]]).strip()[:1] == trial.answer[0]
        before = tokenizer.decode(list(trial.prompt[: trial.needle_index]))
        assert before.endswith("The pass key is") or before.endswith("The pass key is ")
        assert trial.needle_index % 4 == trial.coordinates["needle_shift"]
        assert len(trial.prompt) % 4 == trial.coordinates["tail_shift"]


def _tiny_llama(path, vocab=260):
    torch.manual_seed(1)
    config = transformers.LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, max_position_embeddings=1024)  # fmt: skip
    transformers.LlamaForCausalLM(config).save_pretrained(path)
    return path


def test_batched_decoding_with_a_shared_prefix_and_left_padding_is_one_prompt_at_a_time(tmp_path):
    """A group's prompts decoded as one batch (their common prefix run once, the rest left
    padded, each token at its own position id) give each prompt's own greedy continuation,
    as `generate` gives it one prompt at a time (a second method)."""
    from weakspots.probe.backends import HFBackend

    path = _tiny_llama(tmp_path / "llama")
    config = ProbeConfig(backend="hf", model=str(path), tokenizer="byte", stride=(4,),
                         context=(256,), depth=(1.0,), trials=2, digits=3)  # fmt: skip
    trials = text_trials(config, ByteTokenizer())
    group = [t for t in trials if t.block == 1]
    lengths = {len(t.prompt) for t in group}
    backend = HFBackend(str(path), batch=4)
    assert len(lengths) == 4  # four lengths: padding is needed
    shared = min(len(t.prompt) for t in group)
    assert all(t.prompt[:20] == group[0].prompt[:20] for t in group) and shared > 20
    got = backend.complete_many([t.prompt for t in group], [6] * len(group))
    model = transformers.AutoModelForCausalLM.from_pretrained(str(path)).eval()
    for trial, completion in zip(group, got, strict=True):
        ids = torch.tensor([list(trial.prompt)])
        with torch.no_grad():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=6,
                                 do_sample=False, output_scores=True,
                                 return_dict_in_generate=True, pad_token_id=0)  # fmt: skip
        new = out.sequences[0, ids.shape[1] :].tolist()
        assert list(completion.token_ids) == new
        expected = [float(torch.log_softmax(s[0], -1)[t]) for s, t in zip(out.scores, new, strict=True)]
        np.testing.assert_allclose(completion.token_logprobs, expected, atol=1e-4)


def test_hf_options_are_refused_before_the_model_loads(tmp_path, capsys):
    path = _tiny_llama(tmp_path / "llama")
    capsys.readouterr()
    cases = [
        (["--device", "tpu"], "--device"),
        (["--dtype", "int4"], "--dtype"),
        (["--bos", "maybe"], "--bos"),
        (["--system", "be brief"], "--system"),
        (["--chat", "--tokenizer", "byte"], "--chat"),
        (["--bos", "yes", "--tokenizer", "byte"], "--bos"),
        (["--tokenizer", "server"], "--tokenizer"),
        (["--context", "40"], "--context"),
    ]
    loads = []
    original = transformers.AutoModelForCausalLM.from_pretrained
    transformers.AutoModelForCausalLM.from_pretrained = lambda *a, **k: loads.append(a)
    try:
        for flags, flag in cases:
            code = main(["probe", "--backend", "hf", "--model", str(path), "--tokenizer", "byte",
                         "--quiet", *flags])  # fmt: skip
            err = capsys.readouterr().err.strip()
            assert code == 2 and "\n" not in err, (flags, err)
            assert err.startswith(f"weakspots probe: error: {flag}"), (flags, err)
    finally:
        transformers.AutoModelForCausalLM.from_pretrained = original
    assert loads == []


def test_a_chat_template_and_bos_count_in_the_positions(tmp_path):
    """--chat and --bos: the template's opening and the BOS token are read before the text,
    so the answer's index and the prompt's length count them, and a reply is scored by its
    first number."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    from weakspots.probe.backends import Completion, hf_framing
    from weakspots.probe.design import FILLER, PASSKEY, PASSKEY_QUESTION
    from weakspots.probe.run import is_correct
    from weakspots.probe.tokenizers import HFTokenizer

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    corpus = list(FILLER) * 20 + [p.format(digits="") for p in PASSKEY] * 20 + [PASSKEY_QUESTION] * 20
    bpe.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<s>", "<|user|>", "<|end|>", "<|assistant|>"]))  # fmt: skip
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<s>")
    fast.chat_template = ("{% for m in messages %}<|{{ m.role }}|>{{ m.content }}<|end|>{% endfor %}"
                          "{% if add_generation_prompt %}<|assistant|>{% endif %}")  # fmt: skip
    fast.save_pretrained(tmp_path / "tok")
    tokenizer = HFTokenizer(tmp_path / "tok")
    lead, trail = hf_framing(tokenizer, "yes", True, None)
    bos, user, end, assistant = (tokenizer.encode(t)[0] for t in ("<s>", "<|user|>", "<|end|>", "<|assistant|>"))
    assert lead == (bos, user) and trail == (end, assistant)
    config = ProbeConfig(url="u", model="m", stride=(4,), context=(256,), trials=4)
    for trial in text_trials(config, tokenizer, lead, trail):
        assert trial.prompt[:2] == lead and trial.prompt[-2:] == trail and trial.reply
        assert tokenizer.decode([trial.prompt[trial.needle_index]]).strip()[:1] == trial.answer[0]
        assert trial.needle_index % 4 == trial.coordinates["needle_shift"]
        assert len(trial.prompt) % 4 == trial.coordinates["tail_shift"]
        said = Completion(f"The pass key is {trial.answer}.")
        assert is_correct(trial, said, False)
        assert not is_correct(trial, Completion(f"It is {trial.answer}1."), False)
