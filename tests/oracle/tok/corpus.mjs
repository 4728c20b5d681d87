// corpus.mjs — the strings tokenizer.mjs feeds to lmc and to @huggingface/tokenizers.
//
// Deterministic (seeded PRNG): hand-picked cases first, then random mixes of
// fragments (prose, code, numbers, whitespace runs, CRLF, tabs, accents, combining
// marks, CJK, RTL, emoji ZWJ sequences, special-token text, leading spaces), a few
// invalid UTF-8 byte strings (entries with `hex`) and one input of 100 kB.
// Characters whose class differs between JavaScript and Oniguruma regexes
// (U+0085, U+FEFF as \s) are left out: there the JS oracle is known to differ.

const PROSE = [
  "The quick brown fox jumps over the lazy dog.",
  "It's a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a wife.",
  "I'm sure they'll say we've done what we'd planned; you're right, isn't it?",
  "HELLO World — this is SHOUTING and whispering.",
  "Dr. Smith's e-mail: john.doe@example.com (sent 3/14/2024 at 10:45pm).",
  "Prices rose 3.5% to $1,234.56 in Q3 2023; €99.99 or £7.",
  "naïve café façade coöperate résumé jalapeño Ångström",
  "Straße Œuvre ÆSIR Ørsted İstanbul ŞIŞLI ǅemal",
];
const CODE = [
  "def f(x):\n    return x ** 2  # square\n",
  "int main(void) {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}\n",
  "const a = [1, 2, 3].map((v) => v * 2); // => [2, 4, 6]",
  "<div class=\"a\"><p>Hi &amp; bye</p></div>",
  "SELECT * FROM t WHERE id >= 10 AND name LIKE '%foo%';",
  "{\"key\": [true, false, null], \"n\": -1.5e-3}",
  "    if (x) {\r\n        y();\r\n    }\r\n",
  "for i in range(10):\n\tprint(i)\n\n\n",
  "fn main() -> Result<(), Box<dyn Error>> { Ok(()) }",
  "$ ls -la | grep '^d' && echo \"done\" >> log.txt",
];
const NUMBERS = ["0", "7", "42", "123", "1234", "12345", "1234567890", "3.14159", "-17", "1,000,000",
  "2024-01-31", "0x1F", "1e10", "٣٤٥", "١٢٣٤", "०१२३", "½ ¾ ⅓", "Ⅻ", "①②③"];
const WS = [" ", "  ", "   ", "    ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r\n\r\n", " \n ", "\u00a0", "\u3000",
  "\u2003", " \t \n", "\r", "        "];
const ACCENTS = ["é", "e\u0301", "ñ", "n\u0303", "Å", "A\u030a", "ǘ", "u\u0308\u0301", "ự", "a\u0323\u0302",
  "ﬁ", "ﬀ", "㎞", "Ⅸ", "ｈｅｌｌｏ", "ｶﾀｶﾅ"];
const CJK = ["你好，世界！", "日本語のテキストです。", "한국어 텍스트", "中文测试：机器学习", "漢字かなカナ",
  "𠀀𠀁", "繁體中文", "ひらがな"];
const RTL = ["مرحبا بالعالم", "שלום עולם", "العربية 123", "فارسی", "עברית, English ו-123"];
const EMOJI = ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "❤️", "🇫🇷", "🧑🏿‍💻", "✌🏻", "😀😃😄", "#️⃣", "🫠"];
const OTHER = ["Ελληνικά", "Русский текст", "ภาษาไทย", "हिन्दी", "ქართული", "Tiếng Việt", "Türkçe", "ⓐⓑⓒ",
  "∑∫√∞≠≤", "→←↑↓", "™©®", "…", "«»", "“quotes”", "‘single’", "–—", "•", "§¶", "\u200b", "\u200d", "\u00ad",
  "a\u0000b", "\u0007\u001b[0m", "'s", "'S", "'LL", "n't", "'re'", "''", "'''"];

function rng(seed) {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6D2B79F5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export function buildCorpus(specialTexts, seed = 1234) {
  const r = rng(seed);
  const pick = (a) => a[Math.floor(r() * a.length)];
  const out = [];
  const add = (text) => out.push({ text });
  // hand-picked
  for (const group of [PROSE, CODE, NUMBERS, WS, ACCENTS, CJK, RTL, EMOJI, OTHER]) for (const s of group) add(s);
  for (const s of PROSE.slice(0, 4)) { add(" " + s); add("  " + s); add(s + " "); add("\n" + s); }
  add("");
  add(" ");
  add("a");
  add(" a");
  add("hello\r\nworld\r\n");
  add("tabs\tand\tmore\t\ttabs");
  add("   leading and trailing   ");
  add("a  b   c    d     e");
  add("!!!???...,,,;;;");
  add("http://example.com/path?q=1&r=2#frag");
  add("__init__ __name__ == '__main__'");
  add("camelCaseWord snake_case_word kebab-case-word SCREAMING_CASE");
  for (const sp of specialTexts) {
    add(sp);
    add("hello" + sp + "world");
    add(" " + sp + " ");
    add(sp + sp);
    add("x " + sp + "\ny");
  }
  add("<s>");
  add("</s>");
  add("<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n");
  add("<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>");
  add("<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n");
  add("<s>[INST] Hi [/INST]");
  add("<unk> <pad> <mask>");
  add("<|im_start|"); // broken special text
  add("<<s>>");
  // invalid UTF-8 byte strings (defined behaviour: each ill-formed sequence becomes U+FFFD)
  for (const hex of ["ff", "c3", "e282", "f09f98", "68656cff6c6f", "80808080", "c0af", "eda080", "f4908080",
    "e2828268", "fe", "61c328", "f0288cbc", "e0808080", "2063c3a9c3"]) out.push({ hex });
  // random mixes
  const pools = [PROSE, CODE, NUMBERS, WS, ACCENTS, CJK, RTL, EMOJI, OTHER,
    specialTexts.length ? specialTexts : ["<s>"]];
  while (out.length < 540) {
    const k = 1 + Math.floor(r() * 6);
    let s = "";
    for (let i = 0; i < k; i++) {
      const pool = pick(pools);
      s += pick(pool);
      if (r() < 0.5) s += pick([" ", "", "\n", "  ", "\t"]);
    }
    add(s);
  }
  // one 100 kB input
  let big = "";
  while (big.length < 100000) {
    const pool = pick(pools);
    big += pick(pool) + pick([" ", "\n", "", "  "]);
  }
  add(big);
  return out;
}

// The corpus for one tokenizer.json: its added tokens' text joins the special-token cases.
export function corpusFor(tokenizerJson) {
  const added = (tokenizerJson.added_tokens || []).map((t) => t.content);
  const specials = [...added.slice(0, 6), ...added.slice(-3)];
  for (let i = 0; i < 6 && added.length > 10; i++) specials.push(added[(i * 7919) % added.length]);
  return buildCorpus([...new Set(specials)]);
}
