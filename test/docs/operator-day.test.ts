// docs/operations.md "An operator's day" shows real CLI output: this test runs the same commands on the same
// morning (test/support/operator-day.ts) and compares every console block of that section with what the CLI
// printed, ids aside (uuids differ per run). SAGA_UPDATE_DOCS=1 writes the run's output into the section. The
// commands run in this process through runCli (test/cli/cli.test.ts runs the real binary).
import { readFile, writeFile } from 'node:fs/promises';
import { resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ScriptedSaga } from '../fixtures/scripted-saga.js';
import { cliApp } from '../support/cli-process.js';
import { DIALECTS } from '../support/databases.js';
import { seedOperatorDay } from '../support/operator-day.js';
import { useDatabase } from '../support/suite.js';

const doc = resolve(import.meta.dirname, '..', '..', 'docs', 'operations.md');
const SECTION = "## An operator's day";
const UUID = /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/g;
const BLOCK = /```console\n([\s\S]*?)```/g;

/** The section's text: from its heading to the next `## ` heading. */
function section(markdown: string): { start: number; end: number } {
  const start = markdown.indexOf(SECTION);
  if (start < 0) throw new Error(`docs/operations.md has no '${SECTION}' section`);
  const next = markdown.indexOf('\n## ', start + SECTION.length);
  return { start, end: next < 0 ? markdown.length : next };
}

const masked = (text: string) => text.replace(UUID, '<uuid>');

for (const dialect of DIALECTS) {
  describe(`docs/operations.md, an operator's day (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);
    const app = cliApp(db);
    beforeAll(async () => {
      await app.create();
      await seedOperatorDay(db().orm);
    });
    afterAll(() => app.remove());

    it('shows what the CLI prints for each step', async () => {
      const transcripts: string[] = [];
      const step = async (...args: string[]) => {
        const run = await app.cliInProcess(...args);
        expect(run.code, `${args.join(' ')}: ${run.stderr}`).toBe(0);
        transcripts.push(`$ mikro-orm-saga ${args.map((a) => (/\s/.test(a) ? `"${a}"` : a)).join(' ')}\n${run.stdout}`);
        return run.stdout;
      };
      await step('sagas', 'count');
      await step('sagas', 'list', '--status', 'active', '--created-before', '2026-11-30T09:30:00Z');
      const dead = await step('timers', 'list', '--status', 'dead_lettered');
      const [timerId, sagaId] = dead.split('\n')[1]!.match(UUID)!;
      await step('sagas', 'show', 'scripted', sagaId!);
      await step('timers', 'requeue', timerId!, '--yes');
      await step('purge', '--dispatched-before', '2026-11-30T12:00:00Z', '--completed-sagas-before', '2026-11-30T12:00:00Z', '--yes');

      const markdown = await readFile(doc, 'utf8');
      const { start, end } = section(markdown);
      const body = markdown.slice(start, end);
      if (process.env.SAGA_UPDATE_DOCS === '1' && dialect === 'sqlite') {
        let i = 0;
        const updated = body.replace(BLOCK, () => `\`\`\`console\n${transcripts[i++] ?? ''}\`\`\``);
        await writeFile(doc, markdown.slice(0, start) + updated + markdown.slice(end));
      }
      const shown = [...body.matchAll(BLOCK)].map((match) => masked(match[1]!));
      expect(shown).toEqual(transcripts.map(masked));
    });
  });
}
