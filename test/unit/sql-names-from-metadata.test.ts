// The library's statements name no table or column of its own entities: they read every name from the database
// context, which reads MikroORM's metadata (src/sql/database-context.ts), so the names a mapping gives reach every
// statement. The entity mappings (src/entities) are the one place those names are written. This scans the string
// and template literals of src for them.
import { readdir, readFile } from 'node:fs/promises';
import { join, relative, resolve } from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { SAGA_ENTITIES } from '../../src/entities/index.js';

const src = resolve(import.meta.dirname, '..', '..', 'src');

/** The library's table names, and its column names of more than one word, from the entity mappings. */
function libraryNames(): { tables: string[]; columns: string[] } {
  const tables = SAGA_ENTITIES.map((schema) => schema.meta.tableName).filter((name): name is string => !!name);
  const fields = SAGA_ENTITIES.flatMap((schema) =>
    Object.values(schema.meta.properties).map((p) => (p as { fieldName?: string }).fieldName),
  );
  // One-word columns (`id`, `version`, `name`) are also the aliases the statements give their result columns (`as "id"`):
  // text cannot tell the two apart, so only the multi-word columns are looked for.
  const columns = [...new Set(fields)].filter((field): field is string => !!field && field.includes('_'));
  return { tables, columns };
}

/** Text that reads as a statement: a statement's verb, and a clause after it. */
const SQL = /\b(select|insert|update|delete|with)\b[\s\S]*\b(from|into|set|where|values|returning|as)\b/i;

/**
 * The names `text` types into SQL: a library table or column written as a quoted identifier, a table after a clause
 * that names one (`from saga_timer`), and in text that reads as a statement, any library table or column.
 */
function typedNames(text: string, { tables, columns }: { tables: string[]; columns: string[] }): string[] {
  const any = [...tables, ...columns].join('|');
  const patterns = [
    new RegExp(`["\`](${any})["\`]`, 'g'),
    new RegExp(`\\b(?:from|into|update|join|table)\\s+(${tables.join('|')})\\b`, 'gi'),
    ...(SQL.test(text) ? [new RegExp(`(?<![\\w.])(${any})(?![\\w])`, 'g')] : []),
  ];
  return [...new Set(patterns.flatMap((pattern) => [...text.matchAll(pattern)].map((match) => match[1]!)))];
}

/** Each string or template literal of `source` (a template's parts joined, `${…}` for each expression) and its line. */
function literals(file: string, source: string): { line: number; text: string }[] {
  const found: { line: number; text: string }[] = [];
  const sourceFile = ts.createSourceFile(file, source, ts.ScriptTarget.Latest, true);
  const visit = (node: ts.Node): void => {
    let text: string | undefined;
    if (ts.isStringLiteral(node) || ts.isNoSubstitutionTemplateLiteral(node)) text = node.text;
    if (ts.isTemplateExpression(node)) text = [node.head.text, ...node.templateSpans.map((span) => `\${…}${span.literal.text}`)].join('');
    if (text !== undefined) found.push({ line: sourceFile.getLineAndCharacterOfPosition(node.getStart()).line + 1, text });
    ts.forEachChild(node, visit);
  };
  visit(sourceFile);
  return found;
}

async function sourceFiles(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { withFileTypes: true });
  const nested = await Promise.all(
    entries.map((e) =>
      e.isDirectory() ? sourceFiles(join(dir, e.name)) : Promise.resolve(e.name.endsWith('.ts') ? [join(dir, e.name)] : []),
    ),
  );
  return nested.flat();
}

describe('SQL names from metadata', () => {
  const names = libraryNames();

  it('reads the names it looks for from the entity mappings', () => {
    expect(names.tables.sort()).toEqual(['saga_handled_message', 'saga_inbox', 'saga_outbox', 'saga_timer']);
    expect(names.columns).toEqual(expect.arrayContaining(['dispatched_at', 'saga_type', 'message_id', 'completed_at']));
  });

  it('finds a table or column typed into SQL, and not a name in a message or a label', () => {
    const typed = (source: string) => literals('probe.ts', source).flatMap(({ text }) => typedNames(text, names));
    expect(typed(`const q = \`update "saga_timer" set \${c.token} = ? where "dispatched_at" is null\`;`)).toEqual([
      'saga_timer',
      'dispatched_at',
    ]);
    expect(typed("const q = 'delete from saga_outbox where saga_id = ?';")).toEqual(['saga_outbox', 'saga_id']);
    expect(typed(`const q = \`select \${c.id} from \${table} where saga_type = ?\`;`)).toEqual(['saga_type']);
    expect(typed("const label = 'saga_timer';")).toEqual([]);
    expect(typed(`const q = \`select \${c.id} as "id", \${c.version} as "version" from \${table}\`;`)).toEqual([]);
  });

  it('no statement in src types a table or column of the library', async () => {
    const offenders: string[] = [];
    for (const file of await sourceFiles(src)) {
      const path = relative(src, file);
      if (path.startsWith('entities/')) continue;
      for (const { line, text } of literals(path, await readFile(file, 'utf8'))) {
        for (const name of typedNames(text, names)) offenders.push(`src/${path}:${line} ${name}`);
      }
    }
    expect(offenders).toEqual([]);
  });
});
