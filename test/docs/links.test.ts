// Every relative link in the README, the changelog and docs/ reaches a file that exists, and every `#anchor` a
// heading of that file (GitHub's heading ids: lower case, punctuation dropped, spaces as hyphens, `-1` for a repeat).
// Every test file a page names exists, and every promise docs/guarantees.md pins to a test names one that is there.
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

  it('docs/guarantees.md pins each promise of its summary to a test that is there, by title', async () => {
    const text = await readFile(join(root, 'docs/guarantees.md'), 'utf8');
    const summary = text.slice(text.indexOf('## Summary'), text.indexOf('\n## ', text.indexOf('## Summary') + 1));
    const promises = summary.split('\n- ').slice(1);
    expect(promises.length).toBeGreaterThan(10);
    const unpinned: string[] = [];
    for (const promise of promises) {
      const pin = /Pinned by `(test\/[^`]+\.test\.ts)`: "([^"]+)"/.exec(promise);
      const file = pin && (await readFile(join(root, pin[1]!), 'utf8').catch(() => undefined));
      if (!pin || !file?.includes(pin[2]!)) unpinned.push(promise.slice(0, 60));
    }
    expect(unpinned).toEqual([]);
  });
});
