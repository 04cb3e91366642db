/**
 * Characters a terminal acts on instead of showing: C0 controls but newline and tab, DEL, C1 controls (CSI
 * U+009B among them), and the bidirectional overrides and isolates that reorder what follows them.
 */
// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are exactly what must be escaped.
const TERMINAL_CONTROLS = /[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;

/**
 * `text` safe to write to a terminal: every control character it could act on is shown as its escape
 * (`\x1b`, `\u202e`), so stored text (an error message, a correlation value, a timer name) cannot set the window
 * title, colour or erase lines, or move the cursor. Newlines and tabs are kept.
 */
export function terminalText(text: string): string {
  return text.replace(TERMINAL_CONTROLS, (char) => {
    const code = char.charCodeAt(0);
    return code < 0x100 ? `\\x${code.toString(16).padStart(2, '0')}` : `\\u${code.toString(16).padStart(4, '0')}`;
  });
}
