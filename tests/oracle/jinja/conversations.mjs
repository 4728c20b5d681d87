// conversations.mjs — the chat inputs the Jinja oracle renders with every template.
//
// Builds a deterministic list of chat requests (messages + tools + flags) covering
// system prompts, multi-turn user/assistant, assistant tool calls whose arguments are
// objects (or JSON strings, for templates that concatenate them), tool results, a tools
// list, reasoning content, content given as a list of parts, add_generation_prompt
// true/false and enable_thinking. Each request says which features it uses so a
// template only gets the requests it can render (see FEATURES in jinja.mjs).

const SYSTEMS = [
  "You are a helpful assistant.",
  "Réponds en français. 日本語でもOK. Emoji: 🙂👍🏽",
  "  A system prompt with surrounding spaces and a\nsecond line.  \n",
];
const USERS = [
  "Hello!",
  "What's the weather like in Paris today?",
  "Explain `x = {'a': 1}` in Python.\nUse two lines.",
  'Quotes " and \' and a backslash \\ and a tab\tend',
  "   leading and trailing whitespace   ",
  "Line one\r\nLine two with CRLF",
  "数学: 2 + 2 = ? Answer in 中文.",
  "",
];
const ASSISTANTS = [
  "Hi! How can I help you today?",
  "Sure.\n\n- item 1\n- item 2\n",
  "The answer is 42.",
  "  spaced answer  ",
];
const THINKING = [
  "<think>\nThe user wants the weather. I should call the tool.\n</think>\n\nLet me check.",
  "<think>Short thought.</think>The result is 4.",
];

export const TOOLS = [
  {
    type: "function",
    function: {
      name: "get_weather",
      description: "Get the current weather for a location.",
      parameters: {
        type: "object",
        properties: {
          location: { type: "string", description: "City name, e.g. Paris" },
          unit: { type: "string", enum: ["celsius", "fahrenheit"] },
        },
        required: ["location"],
      },
    },
  },
  {
    type: "function",
    function: {
      name: "search",
      description: "Search the web — returns top results (ünïcödé ok).",
      parameters: {
        type: "object",
        properties: { query: { type: "string" }, limit: { type: "integer", description: "max results" } },
        required: ["query"],
      },
    },
  },
  {
    type: "function",
    function: {
      name: "book_flight",
      description: "Book a flight. Nested schema: arrays, objects, defaults, numbers.",
      parameters: {
        type: "object",
        properties: {
          passengers: { type: "array", items: { type: "object", properties: { name: { type: "string" }, age: { type: "integer" } } } },
          route: { type: "object", properties: { from: { type: "string" }, to: { type: "string" } }, required: ["from", "to"] },
          flexible: { type: "boolean", default: false },
          max_price: { type: "number", description: "in EUR", default: 250.5 },
          cabin: { type: ["string", "null"], enum: ["economy", "business", null] },
        },
        required: ["route"],
      },
      return: { type: "string", description: "booking reference" },
    },
  },
];

export const DOCUMENTS = [
  { title: "Paris weather", text: "Sunny, 21 °C, light wind." },
  { title: "Events", text: "Fête de la musique tonight.\nLouvre open late." },
];

function toolCall(i, name, args, stringArgs) {
  return {
    id: `call_${i}`,
    type: "function",
    function: { name, arguments: stringArgs ? JSON.stringify(args) : args },
  };
}

// A request: { messages, tools?, add_generation_prompt, extra?, uses: Set<string> }
export function buildConversations({ stringArgs = false } = {}) {
  const out = [];
  const add = (messages, uses, opts = {}) => {
    for (const agp of opts.agp ?? [true, false]) {
      out.push({
        messages,
        tools: opts.tools ?? null,
        documents: opts.documents ?? null,
        add_generation_prompt: agp,
        extra: opts.extra ?? null,
        uses: new Set([...uses, ...(opts.tools ? ["tools"] : []), ...(opts.extra ? ["extra"] : []),
          ...(opts.documents ? ["documents"] : [])]),
      });
    }
  };
  // single user turns, with and without a system prompt
  for (let i = 0; i < USERS.length; i++) {
    add([{ role: "user", content: USERS[i] }], []);
    if (i % 2 === 0) add([{ role: "system", content: SYSTEMS[i % 3] }, { role: "user", content: USERS[i] }], ["system"]);
  }
  // multi-turn
  for (let k = 0; k < 4; k++) {
    const msgs = [];
    if (k % 2) msgs.push({ role: "system", content: SYSTEMS[k % 3] });
    for (let t = 0; t <= k; t++) {
      msgs.push({ role: "user", content: USERS[(k + t) % USERS.length] });
      msgs.push({ role: "assistant", content: ASSISTANTS[(k + 2 * t) % ASSISTANTS.length] });
    }
    msgs.push({ role: "user", content: USERS[(k + 3) % USERS.length] });
    add(msgs, k % 2 ? ["system"] : []);
    add(msgs.slice(0, -1), k % 2 ? ["system", "ends_assistant"] : ["ends_assistant"], { agp: [false] });
  }
  // reasoning content inside assistant turns
  for (let k = 0; k < THINKING.length; k++) {
    add([
      { role: "user", content: USERS[1] },
      { role: "assistant", content: THINKING[k] },
      { role: "user", content: USERS[2] },
    ], ["think"]);
  }
  // content as a list of parts
  add([
    { role: "system", content: [{ type: "text", text: "System as parts." }] },
    { role: "user", content: [{ type: "text", text: "Describe this." }, { type: "image" }] },
  ], ["system", "parts"]);
  add([{ role: "user", content: [{ type: "text", text: "  Only text part  " }] }], ["parts"]);
  // enable_thinking
  for (const et of [true, false]) {
    add([{ role: "user", content: USERS[6] }], [], { extra: { enable_thinking: et }, agp: [true] });
  }
  // tools list without calls
  add([{ role: "system", content: SYSTEMS[0] }, { role: "user", content: USERS[1] }], ["system"], { tools: TOOLS });
  add([{ role: "user", content: USERS[0] }], [], { tools: TOOLS });
  // tool calls and results
  for (let k = 0; k < 3; k++) {
    const calls = [toolCall(1, "get_weather", { location: "Paris", unit: "celsius" }, stringArgs)];
    if (k >= 1) calls.push(toolCall(2, "search", { query: "Paris events \"today\"", limit: 3 }, stringArgs));
    const msgs = [];
    if (k !== 1) msgs.push({ role: "system", content: SYSTEMS[k] });
    msgs.push({ role: "user", content: USERS[1] });
    msgs.push({ role: "assistant", content: k === 2 ? "Let me look that up." : "", tool_calls: calls });
    msgs.push({ role: "tool", tool_call_id: "call_1", name: "get_weather", content: '{"temperature": 21.5, "unit": "celsius"}' });
    if (k >= 1) msgs.push({ role: "tool", tool_call_id: "call_2", name: "search", content: "1. Fête de la musique\n2. Louvre" });
    msgs.push({ role: "assistant", content: "It is 21.5 °C in Paris." });
    msgs.push({ role: "user", content: USERS[0] });
    const uses = ["tool_calls", "tool_role"];
    if (k !== 1) uses.push("system");
    add(msgs, uses, { tools: TOOLS });
    add(msgs.slice(0, 4 + (k >= 1 ? 1 : 0)), [...uses, "ends_tool"], { tools: TOOLS, agp: [true] });
  }
  // tool call with reasoning and enable_thinking=false
  add([
    { role: "user", content: USERS[1] },
    { role: "assistant", content: "<think>\nneed tool\n</think>\n\n", tool_calls: [toolCall(3, "get_weather", { location: "Oslo" }, stringArgs)] },
    { role: "tool", content: "sunny" },
  ], ["tool_calls", "tool_role", "think", "ends_tool"], { tools: TOOLS, extra: { enable_thinking: false }, agp: [true] });
  // nested tool schema with a call whose arguments hold arrays, objects, floats and booleans
  add([
    { role: "system", content: SYSTEMS[0] },
    { role: "user", content: "Book Paris→Oslo for two." },
    { role: "assistant", content: "", tool_calls: [toolCall(4, "book_flight", {
      passengers: [{ name: "Ann", age: 34 }, { name: "Bo", age: 7 }], route: { from: "CDG", to: "OSL" },
      flexible: true, max_price: 199.99, cabin: null }, stringArgs)] },
    { role: "tool", content: "REF-42" },
    { role: "assistant", content: "Booked: REF-42." },
  ], ["system", "tool_calls", "tool_role", "ends_assistant"], { tools: TOOLS, agp: [false] });
  // documents (retrieval-augmented templates)
  add([{ role: "user", content: USERS[1] }], ["documents"], { documents: DOCUMENTS });
  add([{ role: "system", content: SYSTEMS[0] }, { role: "user", content: USERS[1] }], ["system", "documents"],
      { documents: DOCUMENTS, tools: TOOLS });
  // roles that break alternation (templates that check must raise on both sides)
  add([{ role: "user", content: "a" }, { role: "user", content: "b" }], ["bad_alternation"], { agp: [true] });
  add([{ role: "assistant", content: "starts with assistant" }, { role: "user", content: "x" }], ["bad_alternation"], { agp: [true] });
  return out;
}
