import { terminalText } from './terminal-text.js';

/**
 * A cell's text: ISO dates (`(not a date)` for an Invalid Date), `-` for nothing, whitespace runs (newlines of an error) folded to one space, and
 * terminal control characters shown as escapes ({@link terminalText}).
 */
export function cell(value: unknown): string {
  if (value === null || value === undefined || value === '') return '-';
  // A state Date property holding what JavaScript cannot (PostgreSQL's infinity) is an Invalid Date.
  if (value instanceof Date) return Number.isNaN(value.getTime()) ? '(not a date)' : value.toISOString();
  const text = typeof value === 'object' ? JSON.stringify(value) : String(value);
  return terminalText(text.replace(/\s+/g, ' '));
}

/**
 * A table as the CLI prints it: upper-case headers, columns padded to their widest cell and two spaces apart,
 * the last column unpadded. No rows prints `(none)` under the headers.
 */
export function formatTable(headers: readonly string[], rows: readonly (readonly unknown[])[]): string {
  const cells = rows.map((row) => row.map(cell));
  const widths = headers.map((header, i) => Math.max(header.length, ...cells.map((row) => row[i]?.length ?? 0)));
  const line = (row: readonly string[]) =>
    row
      .map((text, i) => (i === row.length - 1 ? text : text.padEnd(widths[i]!)))
      .join('  ')
      .trimEnd();
  const body = cells.length === 0 ? ['(none)'] : cells.map(line);
  return [line(headers.map((h) => h.toUpperCase())), ...body].join('\n');
}

/** `key: value` lines, keys padded to the longest. */
export function formatFields(fields: Readonly<Record<string, unknown>>): string {
  const width = Math.max(...Object.keys(fields).map((key) => key.length));
  return Object.entries(fields)
    .map(([key, value]) => `${`${key}:`.padEnd(width + 1)} ${cell(value)}`)
    .join('\n');
}
