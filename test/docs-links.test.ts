// Every relative link in the README, the changelog and docs/ reaches a file that exists, and every `#anchor` a
// heading of that file (GitHub's heading ids: lower case, punctuation dropped, spaces as hyphens, `-1` for a repeat).
import { readdir, readFile, stat } from 'node:fs/promises';
import { dirname, join, normalize } from 'node:path';
import { describe, expect, it } from 'vitest';

const root = join(import.meta.dirname, '..');
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
