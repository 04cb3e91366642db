// Every relative link in the README, the changelog and docs/ reaches a file that exists, and every `#anchor` a
// heading of that file (GitHub's heading ids: lower case, punctuation dropped, spaces as hyphens, `-1` for a repeat).
// Every test file a page names exists, and every promise docs/guarantees.md pins to a test names the exact title of
// an it/test call in that file.
import { readdir, readFile, stat } from 'node:fs/promises';
import { dirname, join, normalize, sep } from 'node:path';
import { describe, expect, it } from 'vitest';

const root = join(import.meta.dirname, '../..');
const withoutCode = (markdown: string) => markdown.replace(/```[\s\S]*?```/g, '');

/** The ids GitHub gives the headings of a markdown file. */
function headingIds(markdown: string): Set<string> {
  const ids = new Set<string>();
  const seen = new Map<string, number>();
  for (const [, heading] of withoutCode(markdown).matchAll(/^#+ (.*)$/gm)) {
    const base = heading!
      .trim()
      .toLowerCase()
      .replace(/[^\p{L}\p{N}_\- ]/gu, '')
      .replaceAll(' ', '-');
    const repeats = seen.get(base) ?? 0;
    seen.set(base, repeats + 1);
    ids.add(repeats === 0 ? base : `${base}-${repeats}`);
  }
  return ids;
}

/** Every test file of the repository, as `test/...` paths. */
async function testFiles(): Promise<string[]> {
  const entries = await readdir(join(root, 'test'), { recursive: true });
  return entries.filter((f) => f.endsWith('.test.ts')).map((f) => `test/${f.split(sep).join('/')}`);
}

/** Whether `pattern` (a path that may hold `*`) names at least one of `files`. */
function namesAFile(pattern: string, files: readonly string[]): boolean {
  const regex = new RegExp(
    `^${pattern
      .split('*')
      .map((part) => part.replace(/[.+?^${}()|[\]\\]/g, '\\$&'))
      .join('[^/]*')}$`,
  );
  return files.some((file) => regex.test(file));
}

async function exists(path: string): Promise<boolean> {
  return stat(path).then(
    () => true,
    () => false,
  );
}

const pages = [
  'README.md',
  'CHANGELOG.md',
  ...(await readdir(join(root, 'docs'))).filter((f) => f.endsWith('.md')).map((f) => `docs/${f}`),
];

describe('the docs link to what exists', () => {
  it.each(pages)('%s: every relative link and anchor resolves', async (page) => {
    const text = await readFile(join(root, page), 'utf8');
    const broken: string[] = [];
    for (const [, link] of withoutCode(text).matchAll(/\]\(([^)\s]+)\)/g)) {
      if (/^[a-z]+:/.test(link!)) continue;
      const [path, anchor] = link!.split('#') as [string, string | undefined];
      const target = path === '' ? page : normalize(join(dirname(page), path));
      if (!(await exists(join(root, target)))) broken.push(`${link} (no file ${target})`);
      else if (anchor && target.endsWith('.md') && !headingIds(await readFile(join(root, target), 'utf8')).has(anchor)) {
        broken.push(`${link} (no heading #${anchor} in ${target})`);
      }
    }
    expect(broken).toEqual([]);
  });
});

describe('the docs name tests that exist', () => {
  it.each(pages)('%s: every test file it names exists', async (page) => {
    const files = await testFiles();
    const text = await readFile(join(root, page), 'utf8');
    const named = [...text.matchAll(/`(test\/[^`\s]*\.test\.ts)`/g)].map(([, path]) => path!);
    expect(named.filter((path) => !namesAFile(path, files))).toEqual([]);
  });

  it('docs/guarantees.md pins each promise of its summary to a test that is there, by its exact title', async () => {
    const text = await readFile(join(root, 'docs/guarantees.md'), 'utf8');
    const summary = text.slice(text.indexOf('## Summary'), text.indexOf('\n## ', text.indexOf('## Summary') + 1));
    const promises = summary.split('\n- ').slice(1);
    expect(promises.length).toBeGreaterThan(10);
    const unpinned: string[] = [];
    for (const promise of promises) {
      const pinned = promise.slice(promise.indexOf('Pinned by '));
      const pins = promise.includes('Pinned by ') ? [...pinned.matchAll(/`(test\/[^`]+\.test\.ts)`: "([^"]+)"/g)] : [];
      if (pins.length === 0) unpinned.push(`${promise.slice(0, 60)}: no pin`);
      for (const [, path, title] of pins) {
        const source = await readFile(join(root, path!), 'utf8').catch(() => undefined);
        if (!source || !testTitles(source).some((matches) => matches(title!))) unpinned.push(`${path}: "${title}"`);
      }
    }
    expect(unpinned).toEqual([]);
  });

  it('a pin matches a whole test title, never part of one; each placeholder of a template title stands for any text', () => {
    const titles = testTitles(
      "it('a step that throws writes nothing: no rows', f);\n" +
        `it(\`\${what}: \${code}, and nothing is written\`, f);\n` +
        "it.runIf(x)(\n  'stop() resolves', f);\n" +
        "describe('a group', () => {});",
    );
    const pinned = (title: string) => titles.some((matches) => matches(title));
    expect(pinned('a step that throws writes nothing: no rows')).toBe(true);
    expect(pinned('a step that throws writes nothing')).toBe(false);
    expect(pinned('a BigInt: PAYLOAD_NOT_SERIALIZABLE, and nothing is written')).toBe(true);
    expect(pinned('a BigInt: PAYLOAD_NOT_SERIALIZABLE')).toBe(false);
    expect(pinned('stop() resolves')).toBe(true);
    expect(pinned('a group')).toBe(false);
  });
});

/**
 * The titles of the `it`/`test` calls in a test file's source (also `it.each(...)`, `it.runIf(...)`), each as a
 * function telling whether a pinned title is that whole title. A string literal matches itself; a template
 * literal matches with each `${...}` standing for any text.
 */
function testTitles(source: string): ((title: string) => boolean)[] {
  const titles: ((title: string) => boolean)[] = [];
  const call = /\b(?:it|test)(?:\.\w+(?:\([^()]*\))?)*\(\s*(['"`])/g;
  for (const match of source.matchAll(call)) {
    const quote = match[1]!;
    const start = match.index! + match[0].length;
    const parts = quote === '`' ? templateParts(source, start) : [stringLiteral(source, start, quote)];
    if (!parts) continue;
    const regex = new RegExp(`^${parts.map((part) => part.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')).join('[\\s\\S]*')}$`);
    titles.push((title) => regex.test(title));
  }
  return titles;
}

/** The value of the string literal whose text starts at `start` (after its opening quote). */
function stringLiteral(source: string, start: number, quote: string): string {
  let value = '';
  for (let i = start; i < source.length; i++) {
    const c = source[i]!;
    if (c === quote) return value;
    if (c === '\\') value += source[++i];
    else value += c;
  }
  return value;
}

/** The fixed parts of the template literal whose text starts at `start`, split where each `${...}` stands. */
function templateParts(source: string, start: number): string[] | undefined {
  const parts: string[] = [];
  let part = '';
  for (let i = start; i < source.length; i++) {
    const c = source[i]!;
    if (c === '`') return [...parts, part];
    if (c === '\\') part += source[++i];
    else if (c === '$' && source[i + 1] === '{') {
      i = skipExpression(source, i + 2);
      parts.push(part);
      part = '';
    } else part += c;
  }
  return undefined;
}

/** The index of the `}` closing the expression that starts at `start`, skipping strings and nested templates. */
function skipExpression(source: string, start: number): number {
  let depth = 0;
  for (let i = start; i < source.length; i++) {
    const c = source[i]!;
    if (c === "'" || c === '"') {
      for (i++; i < source.length && source[i] !== c; i++) if (source[i] === '\\') i++;
    } else if (c === '`') {
      i = closingBacktick(source, i + 1);
    } else if (c === '{') depth++;
    else if (c === '}') {
      if (depth === 0) return i;
      depth--;
    }
  }
  return source.length;
}

/** The index of the backtick closing the template literal whose text starts at `start`. */
function closingBacktick(source: string, start: number): number {
  for (let i = start; i < source.length; i++) {
    const c = source[i]!;
    if (c === '`') return i;
    if (c === '\\') i++;
    else if (c === '$' && source[i + 1] === '{') i = skipExpression(source, i + 2);
  }
  return source.length;
}
