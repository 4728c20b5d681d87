// malformed.mjs — requests lmc serve must refuse with a 4xx and a JSON error body
// (OpenAI style; Anthropic style on /v1/messages). Expects a server started with
// --max-body 65536 and the demo model (context 1024).
const chat = "/v1/chat/completions", comp = "/v1/completions", msg = "/v1/messages";
const J = JSON.stringify;
const user = [{ role: "user", content: "hi" }];

export function malformedCases() {
  const c = [];
  const add = (name, path, body, status = 400, extra = {}) => c.push({ name, path, body, status, ...extra });
  // JSON itself
  add("not JSON", chat, "not json");
  add("empty body", chat, "");
  add("truncated JSON", chat, '{"messages": [');
  add("trailing garbage", chat, '{"messages": []} xx');
  add("array body", chat, "[1,2]");
  add("string body", chat, '"hello"');
  add("invalid UTF-8", chat, Buffer.concat([Buffer.from('{"messages":[{"role":"user","content":"'), Buffer.from([0xff, 0xfe, 0xc3]), Buffer.from('"}]}')]));
  add("overlong UTF-8", chat, Buffer.concat([Buffer.from('{"messages":[{"role":"user","content":"'), Buffer.from([0xc0, 0xaf]), Buffer.from('"}]}')]));
  add("deep nesting", chat, "[".repeat(20000) + "]".repeat(20000));
  // messages
  add("missing messages", chat, J({ model: "demo" }));
  add("messages not a list", chat, J({ messages: "hi" }));
  add("empty messages", chat, J({ messages: [] }));
  add("message not an object", chat, J({ messages: [1] }));
  add("message without role", chat, J({ messages: [{ content: "x" }] }));
  add("unknown role", chat, J({ messages: [{ role: "wizard", content: "x" }] }));
  add("content a number", chat, J({ messages: [{ role: "user", content: 42 }] }));
  add("user content null", chat, J({ messages: [{ role: "user", content: null }] }));
  add("image content part", chat, J({ messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "x" } }] }] }));
  add("text part without text", chat, J({ messages: [{ role: "user", content: [{ type: "text" }] }] }));
  add("prompt longer than the context", chat, J({ messages: [{ role: "user", content: "and the LORD said ".repeat(600) }] }), 400, { code: "context_length_exceeded" });
  // fields
  add("model not a string", chat, J({ model: 5, messages: user }));
  add("temperature a string", chat, J({ messages: user, temperature: "hot" }));
  add("temperature 5", chat, J({ messages: user, temperature: 5 }));
  add("top_p 0", chat, J({ messages: user, top_p: 0 }));
  add("top_p 2", chat, J({ messages: user, top_p: 2 }));
  add("top_k -1", chat, J({ messages: user, top_k: -1 }));
  add("min_p 2", chat, J({ messages: user, min_p: 2 }));
  add("max_tokens -1", chat, J({ messages: user, max_tokens: -1 }));
  add("max_tokens 0", chat, J({ messages: user, max_tokens: 0 }));
  add("max_tokens 1.5", chat, J({ messages: user, max_tokens: 1.5 }));
  add("max_tokens beyond the context", chat, J({ messages: user, max_tokens: 100000 }), 400, { code: "context_length_exceeded" });
  add("max_completion_tokens a string", chat, J({ messages: user, max_completion_tokens: "9" }));
  add("stop a number", chat, J({ messages: user, stop: 5 }));
  add("stop empty string", chat, J({ messages: user, stop: [""] }));
  add("stop list too long", chat, J({ messages: user, stop: Array.from({ length: 20 }, (_, i) => "s" + i) }));
  add("stream not a boolean", chat, J({ messages: user, stream: "yes" }));
  add("stream_options not an object", chat, J({ messages: user, stream: true, stream_options: "x" }));
  add("n = 2", chat, J({ messages: user, n: 2 }));
  add("logit_bias key not an id", chat, J({ messages: user, logit_bias: { abc: 1 } }));
  add("logit_bias out of range", chat, J({ messages: user, logit_bias: { 5: 1000 } }));
  add("logit_bias id beyond vocab", chat, J({ messages: user, logit_bias: { 999999: 1 } }));
  add("presence_penalty 3", chat, J({ messages: user, presence_penalty: 3 }));
  add("seed a string", chat, J({ messages: user, seed: "x" }));
  add("response_format json_schema without schema", chat, J({ messages: user, response_format: { type: "json_schema", json_schema: {} } }));
  add("json_schema with an unsupported keyword", chat, J({ messages: user, response_format: { type: "json_schema", json_schema: { name: "x", schema: { type: "number", multipleOf: 3 } } } }));
  add("json_schema required property not defined", chat, J({ messages: user, response_format: { type: "json_schema", json_schema: { name: "x", schema: { type: "object", properties: {}, required: ["a"] } } } }));
  add("top_logprobs without logprobs", chat, J({ messages: user, top_logprobs: 2 }));
  add("top_logprobs 50", chat, J({ messages: user, logprobs: true, top_logprobs: 50 }));
  add("response_format not an object", chat, J({ messages: user, response_format: "json" }));
  add("response_format unknown type", chat, J({ messages: user, response_format: { type: "yaml" } }));
  const tool = { type: "function", function: { name: "f", parameters: { type: "object" } } };
  add("tools not a list", chat, J({ messages: user, tools: {} }));
  add("tool without function", chat, J({ messages: user, tools: [{ type: "function" }] }));
  add("tool name with spaces", chat, J({ messages: user, tools: [{ type: "function", function: { name: "a b" } }] }));
  add("tool parameters not an object", chat, J({ messages: user, tools: [{ type: "function", function: { name: "f", parameters: 3 } }] }));
  add("tool_choice names an unknown tool", chat, J({ messages: user, tools: [tool], tool_choice: { type: "function", function: { name: "g" } } }));
  add("tool_choice unknown word", chat, J({ messages: user, tools: [tool], tool_choice: "always" }));
  add("tool_choice required without tools", chat, J({ messages: user, tool_choice: "required" }));
  add("forced tool_choice with response_format json_schema", chat, J({ messages: user, tools: [tool],
    tool_choice: { type: "function", function: { name: "f" } },
    response_format: { type: "json_schema", json_schema: { name: "x", schema: { type: "object" } } } }));
  add("tool_choice required with response_format json_schema", chat, J({ messages: user, tools: [tool], tool_choice: "required",
    response_format: { type: "json_schema", json_schema: { name: "x", schema: { type: "object" } } } }));
  add("assistant tool_calls malformed", chat, J({ messages: [{ role: "assistant", content: null, tool_calls: [{ function: {} }] }, ...user] }));
  // completions
  add("completions: missing prompt", comp, J({ max_tokens: 4 }));
  add("completions: prompt a number", comp, J({ prompt: 5 }));
  add("completions: empty prompt", comp, J({ prompt: "" }));
  add("completions: token id beyond vocab", comp, J({ prompt: [1, 99999] }));
  add("completions: several prompts", comp, J({ prompt: ["a", "b"] }));
  add("completions: logprobs 9", comp, J({ prompt: "In", logprobs: 9 }));
  add("completions: max_tokens 0", comp, J({ prompt: "In", max_tokens: 0 }));
  // Anthropic
  add("messages: missing max_tokens", msg, J({ model: "demo", messages: user }));
  add("messages: missing messages", msg, J({ model: "demo", max_tokens: 5 }));
  add("messages: system role inside messages", msg, J({ max_tokens: 5, messages: [{ role: "system", content: "x" }] }));
  add("messages: image block", msg, J({ max_tokens: 5, messages: [{ role: "user", content: [{ type: "image", source: {} }] }] }));
  add("messages: temperature 1.5", msg, J({ max_tokens: 5, messages: user, temperature: 1.5 }));
  add("messages: stop_sequences a string", msg, J({ max_tokens: 5, messages: user, stop_sequences: "x" }));
  add("messages: not JSON", msg, "{{");
  add("messages: tool without input_schema", msg, J({ max_tokens: 5, messages: user, tools: [{ name: "f" }] }));
  add("messages: tool_choice names an unknown tool", msg, J({ max_tokens: 5, messages: user, tools: [{ name: "f", input_schema: { type: "object" } }], tool_choice: { type: "tool", name: "g" } }));
  add("messages: tool_use in a user message", msg, J({ max_tokens: 5, messages: [{ role: "user", content: [{ type: "tool_use", id: "t", name: "f", input: {} }] }] }));
  add("messages: tool_result without tool_use_id", msg, J({ max_tokens: 5, messages: [{ role: "user", content: [{ type: "tool_result", content: "x" }] }] }));
  add("messages: max_tokens beyond the context", msg, J({ max_tokens: 5000, messages: user }));
  add("count_tokens: no messages (Anthropic style)", "/v1/messages/count_tokens", J({ model: "demo" }));
  // routes and methods
  add("unknown route", "/v1/nope", "{}", 404, { method: "POST" });
  add("unknown GET route", "/", undefined, 404, { method: "GET" });
  add("GET on a POST route", chat, undefined, 405, { method: "GET" });
  add("DELETE /v1/models", "/v1/models", undefined, 405, { method: "DELETE" });
  add("PUT /health", "/health", "{}", 405, { method: "PUT" });
  add("GET /v1/messages (Anthropic style)", msg, undefined, 405, { method: "GET" });
  // embeddings
  const emb = "/v1/embeddings";
  add("embeddings: missing input", emb, J({ model: "demo" }));
  add("embeddings: empty list", emb, J({ input: [] }));
  add("embeddings: empty string", emb, J({ input: [""] }));
  add("embeddings: input a number", emb, J({ input: 5 }));
  add("embeddings: token id beyond vocab", emb, J({ input: [[1, 99999]] }));
  add("embeddings: encoding_format hex", emb, J({ input: "x", encoding_format: "hex" }));
  add("embeddings: dimensions 0", emb, J({ input: "x", dimensions: 0 }));
  add("embeddings: input longer than the context", emb, J({ input: "and the LORD said ".repeat(600) }), 400, { code: "context_length_exceeded" });
  // tokenize / detokenize
  add("tokenize: no content", "/tokenize", "{}");
  add("tokenize: content a number", "/tokenize", J({ content: 5 }));
  add("detokenize: tokens a string", "/detokenize", J({ tokens: "x" }));
  add("detokenize: negative id", "/detokenize", J({ tokens: [-1] }));
  add("detokenize: id beyond vocab", "/detokenize", J({ tokens: [1e9] }));
  // size limit
  add("body over the limit", chat, J({ messages: [{ role: "user", content: "x".repeat(70000) }] }), 413);
  add("body over the limit (Anthropic style)", msg, J({ max_tokens: 5, messages: [{ role: "user", content: "x".repeat(70000) }] }), 413);
  return c;
}
