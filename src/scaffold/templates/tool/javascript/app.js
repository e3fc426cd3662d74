// @NAME@: a tool for a mur model capsule, written in JavaScript. `mur build` turns this module
// into tool.wasm with componentize-js, against the runtime's tool world, and packs it with the
// capsule.
//
// The model sees the name, description and input schema `describe` returns, and calls the tool
// with a JSON object matching the schema; a fresh instance runs each call. This one counts the
// words of `text`. To report a failure to the model, throw a string: the task goes on.

const SCHEMA = {
  type: 'object',
  properties: { text: { type: 'string', description: 'The text whose words are counted.' } },
  required: ['text'],
};

export function describe() {
  return {
    name: '@NAME@',
    description: 'Counts the words of a text: the number of whitespace-separated words in `text`.',
    inputSchema: JSON.stringify(SCHEMA),
  };
}

export function call(input) {
  let args;
  try {
    args = JSON.parse(input);
  } catch (e) {
    throw `the input is not JSON: ${e.message}`;
  }
  if (typeof args?.text !== 'string') {
    throw '`text` must be a string';
  }
  return String(args.text.split(/\s+/).filter((w) => w).length);
}
