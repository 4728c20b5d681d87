"""hf_synth.py — small tokenizers built and run by Python `tokenizers`, as goldens for lmc.

    python3 tests/oracle/tok/hf_synth.py OUT_DIR

The real tokenizer files of the oracle test only exercise a few components. This script
trains tiny models (BPE, Unigram, WordPiece, WordLevel) with many combinations of
normalizers, pre-tokenizers, post-processors, decoders and added-token flags, then writes
OUT_DIR/<case>/tokenizer.json and OUT_DIR/<case>/cases.jsonl: for each test string (hex
of its UTF-8) the ids with and without special tokens and both decodes (hex). The files
are committed under tests/oracle/tok/synth/ and checked by tests/unit/test_tokenizer.c.
Runs where Python `tokenizers` is installed (the GPU machine).
"""
import json
import os
import random
import sys
import traceback

from tokenizers import AddedToken, Regex, Tokenizer, __version__
from tokenizers import decoders, models, normalizers, pre_tokenizers, processors, trainers

TRAIN = [
    "The quick brown fox jumps over the lazy dog.", "Hello world! Hello, hello WORLD.",
    "It's a truth universally acknowledged; we've done what we'd planned.",
    "naïve café résumé Ångström façade coöperate jalapeño", "Straße ŒUVRE İstanbul ǅemal",
    "def f(x):\n    return x ** 2  # square", "for i in range(10):\n\tprint(i)",
    "Prices rose 3.5% to $1,234.56 in Q3 2023; €99.99 or £7.", "12345 67890 3.14159 2024-01-31",
    "你好，世界！机器学习很有趣。", "日本語のテキストです。", "한국어 텍스트", "مرحبا بالعالم", "שלום עולם",
    "Русский текст и Ελληνικά", "emoji 😀 👍🏽 👨‍👩‍👧‍👦 🇫🇷", "unaffable unbelievable undo redo",
    "camelCaseWord snake_case_word kebab-case-word", "a-b a--b -a-b a---b", "x1y22z333",
    "e\u0301 n\u0303 A\u030a ﬁ ﬀ ㎞ ｈｅｌｌｏ", "tabs\tand\tmore   spaces\r\nCRLF\r\n",
]
TESTS = [
    "", " ", "a", " a", "  a  ", "Hello world!", "hello WORLD", "The quick brown fox.", "unaffable",
    "naïve café", "e\u0301", "ﬁne ㎞", "ｈｅｌｌｏ", "İstanbul", "Straße", "你好世界", "日本語", "한국어",
    "مرحبا", "😀👍🏽", "👨‍👩‍👧‍👦", "x1y22z333", "3.14159", "1,234.56", "a-b", "a--b", "-a-b", "a---b-",
    "def f(x):\n    return x", "\t\ttabs", "CRLF\r\nline", "   leading", "trailing   ", "a  b   c",
    "!!!???...", "snake_case_word", "camelCaseWord", "zzzqqqxxx", "Ωmega ∑∫√", "\u00a0nbsp\u3000ideo",
    "[CLS] hello [SEP]", "<s>hello</s>", "hello<mask>world", "hello <mask> world", "a<mask>b",
    "<s> a </s>", "hello world", "Hello World", "catcat cat cat's", "the cat sat", "<extra>x<extra>",
    "hi [NEW] there", "hi[NEW]there", "word_piece ##ab", "\u200bzero\u200dwidth", "a\u0000b",
    "a\u0085b\u00a0c", "ｶﾞｷﾞ", "①②⑶", "ﾊﾟﾋﾟ", "e\u0301\u0323x", "\u1100\u1161\u11a8", "\ufb01x\u2163",
    "a\tb\nc\rd", "x\u200cy", "\u3000\u3000z", "Ａ１！", "\U0001d400", "\u00bd\u00b2", "g\u0308\u0301",
]


def strings():
    rnd = random.Random(1234)
    out = list(TESTS)
    pool = TESTS + TRAIN
    while len(out) < 160:
        k = rnd.randint(2, 4)
        out.append(rnd.choice(["", " ", "\n"]).join(rnd.choice(pool) for _ in range(k)))
    return out


def bpe_trainer(**kw):
    return trainers.BpeTrainer(vocab_size=kw.pop("vocab_size", 400), show_progress=False, **kw)


def case_bytelevel_roberta():
    t = Tokenizer(models.BPE())
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)
    t.decoder = decoders.ByteLevel()
    t.train_from_iterator(TRAIN, bpe_trainer(special_tokens=["<s>", "<pad>", "</s>", "<unk>"],
                                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    t.add_special_tokens([AddedToken("<mask>", lstrip=True, special=True)])
    t.post_processor = processors.RobertaProcessing(("</s>", t.token_to_id("</s>")), ("<s>", t.token_to_id("<s>")))
    return t


def case_sp_bpe_metaspace_first():
    t = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    t.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()])
    t.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=True)
    t.decoder = decoders.Sequence([decoders.Metaspace(replacement="▁", prepend_scheme="first"), decoders.ByteFallback(),
                                   decoders.Fuse()])
    specials = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    t.train_from_iterator(TRAIN, bpe_trainer(vocab_size=600, special_tokens=specials))
    t.add_tokens([AddedToken("[NEW]", single_word=True, normalized=False)])
    t.post_processor = processors.TemplateProcessing(single="<s> $A </s>", pair="<s> $A </s> $B </s>",
                                                     special_tokens=[("<s>", t.token_to_id("<s>")), ("</s>", t.token_to_id("</s>"))])
    return t


def case_unigram_always():
    t = Tokenizer(models.Unigram())
    t.normalizer = normalizers.Sequence([normalizers.NFKD(), normalizers.StripAccents(), normalizers.Strip()])
    t.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    t.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    t.train_from_iterator(TRAIN, trainers.UnigramTrainer(vocab_size=300, special_tokens=["<unk>", "[CLS]", "[SEP]"],
                                                         unk_token="<unk>", show_progress=False))
    t.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
                                                     special_tokens=[("[CLS]", t.token_to_id("[CLS]")), ("[SEP]", t.token_to_id("[SEP]"))])
    return t


def case_unigram_nosplit_bytefallback():
    t = Tokenizer(models.Unigram())
    t.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never", split=False)
    t.decoder = decoders.Sequence([decoders.Metaspace(replacement="▁", prepend_scheme="never"), decoders.ByteFallback(), decoders.Fuse()])
    specials = ["<unk>"] + [f"<0x{b:02X}>" for b in range(256)]
    t.train_from_iterator(TRAIN, trainers.UnigramTrainer(vocab_size=500, special_tokens=specials, unk_token="<unk>",
                                                         show_progress=False))
    j = json.loads(t.to_str())
    j["model"]["byte_fallback"] = True
    return Tokenizer.from_str(json.dumps(j))


def case_wordpiece_bert():
    t = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    t.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=True)
    t.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    t.decoder = decoders.WordPiece(prefix="##", cleanup=True)
    t.train_from_iterator(TRAIN, trainers.WordPieceTrainer(vocab_size=400, special_tokens=["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"],
                                                           show_progress=False))
    t.post_processor = processors.BertProcessing(("[SEP]", t.token_to_id("[SEP]")), ("[CLS]", t.token_to_id("[CLS]")))
    return t


def case_wordlevel_seq():
    t = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    t.normalizer = normalizers.Sequence([normalizers.Replace(Regex(r"\s+"), " "), normalizers.Lowercase(),
                                         normalizers.Strip(left=True, right=False)])
    t.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Digits(individual_digits=True),
                                               pre_tokenizers.Punctuation(behavior="contiguous")])
    t.decoder = decoders.Sequence([decoders.Replace("_", " "), decoders.Strip(content="x", left=2, right=0)])
    t.train_from_iterator(TRAIN, trainers.WordLevelTrainer(vocab_size=300, special_tokens=["[UNK]"], show_progress=False))
    return t


def case_split_behaviors():
    t = Tokenizer(models.BPE(unk_token="[UNK]", continuing_subword_prefix="##", end_of_word_suffix="</w>"))
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(pattern="-", behavior="merged_with_previous"),
        pre_tokenizers.Split(pattern=Regex(r"\d+"), behavior="merged_with_next"),
        pre_tokenizers.Split(pattern=Regex(r"\s+"), behavior="removed"),
        pre_tokenizers.Split(pattern=Regex(r"[a-z]+"), behavior="contiguous", invert=True),
        pre_tokenizers.CharDelimiterSplit("_"),
    ])
    t.decoder = decoders.BPEDecoder(suffix="</w>")
    t.train_from_iterator(TRAIN, bpe_trainer(vocab_size=500, special_tokens=["[UNK]"], continuing_subword_prefix="##",
                                             end_of_word_suffix="</w>"))
    return t


def case_added_flags():
    t = Tokenizer(models.BPE(unk_token="[UNK]", ignore_merges=True))
    t.normalizer = normalizers.Sequence([normalizers.Lowercase(), normalizers.Prepend("_")])
    t.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Whitespace(), pre_tokenizers.Digits(individual_digits=False)])
    t.decoder = decoders.Fuse()
    t.train_from_iterator(TRAIN, bpe_trainer(vocab_size=450, special_tokens=["[UNK]"]))
    t.add_special_tokens([AddedToken("<s>", rstrip=True), AddedToken("</s>", lstrip=True), AddedToken("<mask>", lstrip=True, rstrip=True)])
    t.add_tokens([AddedToken("cat", single_word=True), AddedToken("HELLO", normalized=True), AddedToken("<extra>", normalized=False),
                  AddedToken("World", normalized=False)])
    return t


def case_bytelevel_noregex_nfc():
    t = Tokenizer(models.BPE())
    t.normalizer = normalizers.NFC()
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"),
                             behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    t.decoder = decoders.ByteLevel()
    t.train_from_iterator(TRAIN, bpe_trainer(vocab_size=500, special_tokens=["<|endoftext|>"],
                                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    t.add_special_tokens(["<|im_start|>", "<|im_end|>"])
    t.post_processor = processors.Sequence([processors.ByteLevel(trim_offsets=False),
                                            processors.TemplateProcessing(single="<|im_start|> $A <|im_end|>",
                                                                          special_tokens=[("<|im_start|>", t.token_to_id("<|im_start|>")),
                                                                                          ("<|im_end|>", t.token_to_id("<|im_end|>"))])])
    return t


CASES = {name[5:]: fn for name, fn in globals().items() if name.startswith("case_")}


def main():
    out_dir = sys.argv[1]
    texts = strings()
    ok = 0
    for name, fn in CASES.items():
        try:
            t = fn()
            d = os.path.join(out_dir, name)
            os.makedirs(d, exist_ok=True)
            t.save(os.path.join(d, "tokenizer.json"))
            t = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))   # what lmc reads
            rows = []
            for s in texts:
                ids = t.encode(s, add_special_tokens=True).ids
                ids_ns = t.encode(s, add_special_tokens=False).ids
                rows.append(json.dumps({"hex": s.encode("utf-8").hex(), "ids": ids, "ids_ns": ids_ns,
                                        "dec_hex": t.decode(ids, skip_special_tokens=False).encode("utf-8").hex(),
                                        "dec_skip_hex": t.decode(ids, skip_special_tokens=True).encode("utf-8").hex()}))
            with open(os.path.join(d, "cases.jsonl"), "w") as f:
                f.write("\n".join(rows) + "\n")
            ok += 1
            print(f"{name}: {len(rows)} cases, vocab {t.get_vocab_size()}")
        except BaseException:  # pyo3 panics are BaseException
            print(f"{name}: FAILED")
            traceback.print_exc()
    print(f"tokenizers {__version__}: {ok}/{len(CASES)} cases written")


if __name__ == "__main__":
    main()
