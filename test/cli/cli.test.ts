// The operator CLI against every database: it finds the app's config and sagas, prints tables or JSON, exits
// 0/1/2/3, and writes only with --yes (or a confirmation on a terminal). The commands run in this process through
// runCli; the real binary (src/cli/main.ts) runs as a subprocess once per database, and once to refuse a write with
// stdin not a terminal (refused before any database is opened).
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cell, formatFields } from '../../src/cli/format-table.js';
import { CLI_COMMANDS, type CliIo, runCli } from '../../src/cli/run-cli.js';
import { terminalText } from '../../src/cli/terminal-text.js';
import { type SagaOutbox, SagaRuntime } from '../../src/index.js';
import { encodeCursor } from '../../src/operations/page-cursor.js';
import { NumberedSaga, numberedSaga } from '../fixtures/numbered-saga.js';
import { ScriptedSaga } from '../fixtures/scripted-saga.js';
import { type CliRun, cliApp, cliDatabaseEnv, FIXTURE_FLAGS, runCliInProcess, runCliProcess } from '../support/cli-process.js';
import { DIALECTS } from '../support/databases.js';
import { seedOperatorDay } from '../support/operator-day.js';
import { REPO_ROOT } from '../support/repository.js';
import { rowsOf } from '../support/rows.js';
import { useDatabase } from '../support/suite.js';

const fixtures = join(REPO_ROOT, 'test', 'fixtures');

/** An in-process run, for what needs no database: no terminal, or one that answers `answer` to every question. */
async function inProcess(...argv: string[]): Promise<CliRun> {
  return inProcessAnswering(undefined, ...argv);
}

async function inProcessAnswering(answer: ((question: string) => string) | undefined, ...argv: string[]): Promise<CliRun> {
  const out: string[] = [];
  const err: string[] = [];
  const ask = answer && (async (question: string) => answer(question));
  const io: CliIo = { cwd: REPO_ROOT, stdout: (t) => out.push(t), stderr: (t) => err.push(t), ask };
  const code = await runCli(argv, io);
  return { code, stdout: out.join('\n'), stderr: err.join('\n') };
}

describe('the CLI without a database', () => {
  it('answers --help on every command with its usage, exit 0', async () => {
    for (const command of CLI_COMMANDS) {
      const run = await inProcess(...command.name.split(' '), '--help');
      expect(run.code, command.name).toBe(0);
      expect(run.stdout).toContain(`Usage: mikro-orm-saga ${command.name}`);
      expect(run.stdout.includes('--yes to confirm') || run.stdout.includes('pass --yes')).toBe(command.confirm !== undefined);
    }
    expect((await inProcess('--help')).stdout).toContain('timers requeue <id>...');
    expect((await inProcess('timers', '--help')).stdout).not.toContain('sagas list');
  });

  it('exits 2 on an unknown command, an unknown option, a malformed date, and a write without --yes and no terminal', async () => {
    expect((await inProcess('timers', 'explode')).code).toBe(2);
    expect(await inProcess('sagas', 'list', '--colour')).toMatchObject({
      code: 2,
      stderr: expect.stringContaining("Unknown option '--colour'"),
    });
    const noYes = await inProcess('purge', '--dispatched-before', '7d');
    expect(noYes).toMatchObject({ code: 2, stderr: expect.stringContaining('pass --yes') });
    const config = join(fixtures, 'no-such.config.ts');
    expect(await inProcess('sagas', 'count', '--config', config)).toMatchObject({ code: 2, stderr: expect.stringContaining('--config') });
  });

  it('with --json, an unknown command prints { error } on stdout and exits 2; help stays on stderr', async () => {
    for (const argv of [['bogus'], ['timers', 'explode'], []]) {
      const run = await inProcess(...argv, '--json');
      expect(run.code, argv.join(' ')).toBe(2);
      expect(JSON.parse(run.stdout)).toEqual({ error: { code: 'USAGE', message: expect.stringContaining('--help for the list') } });
      expect(run.stderr).toContain('Usage: mikro-orm-saga');
    }
    expect(await inProcess('bogus')).toMatchObject({ code: 2, stdout: '' });
  });

  it('shows terminal control characters as escapes and keeps newlines and tabs', () => {
    expect(terminalText('a\x1b]0;X\x07\x1b[31mb\n\tc\x9b2J\u202ed\x7f')).toBe('a\\x1b]0;X\\x07\\x1b[31mb\n\tc\\x9b2J\\u202ed\\x7f');
    expect(cell('boom\x1b[2K\r\nline')).toBe('boom\\x1b[2K line');
  });

  it("prints an Invalid Date (a state Date property holding PostgreSQL's infinity) as (not a date) instead of throwing", () => {
    expect(cell(new Date(Number.POSITIVE_INFINITY))).toBe('(not a date)');
    expect(formatFields({ validUntil: new Date(Number.NaN), at: new Date(0) })).toBe(
      'validUntil: (not a date)\nat:         1970-01-01T00:00:00.000Z',
    );
  });

  it('as a real process with stdin not a terminal, refuses a write without --yes: exit 2, the reason on stderr, nothing on stdout', async () => {
    const refused = await runCliProcess(['timers', 'requeue', randomUUID()], REPO_ROOT);
    expect(refused).toMatchObject({ code: 2, stdout: '', stderr: expect.stringContaining('--yes') });
  });

  it('asks before a write on a terminal: no leaves everything unopened (exit 1), yes goes on to the database', async () => {
    const asked: string[] = [];
    const missing = ['--config', join(fixtures, 'no-such.config.ts')];
    const no = await inProcessAnswering(
      (q) => {
        asked.push(q);
        return 'n';
      },
      'timers',
      'cancel',
      randomUUID(),
      ...missing,
    );
    expect(no).toMatchObject({ code: 1, stdout: 'Declined: nothing was changed.' });
    expect(asked).toEqual(['Cancel (delete) 1 pending timer(s)? [y/N] ']);
    // Past the question it loads the config: this one does not exist, so that is where it stops.
    const yes = await inProcessAnswering(() => 'y', 'timers', 'cancel', randomUUID(), ...missing);
    expect(yes).toMatchObject({ code: 2, stderr: expect.stringContaining('No MikroORM config could be loaded') });
  });
});

for (const dialect of DIALECTS) {
  describe(`the CLI on ${dialect}`, () => {
    const db = useDatabase(dialect, [ScriptedSaga, NumberedSaga]);
    const app = cliApp(db);
    // In this process through runCli, from the app folder: its package.json names the sagas; MikroORM reads
    // package.json `mikro-orm.configPaths` from the process's working directory, so the real binary proves that.
    const cli = app.cliInProcess;
    const json = async (...args: string[]) => {
      const run = await cli(...args, '--json');
      expect(run.code, run.stderr).toBe(0);
      return JSON.parse(run.stdout);
    };
    const rows = () => rowsOf(db().orm);

    beforeAll(async () => {
      await app.create();
      await seedOperatorDay(db().orm);
    });
    afterAll(() => app.remove());

    it('as a real process, finds the config and sagas from package.json, prints on stdout and exits 0', async () => {
      const active = await app.cli('sagas', 'list', '--status', 'active', '--json');
      expect(active.code, active.stderr).toBe(0);
      expect(JSON.parse(active.stdout).items.map((s: { correlation: string }) => s.correlation)).toEqual(['order-1042', 'order-1041']);
    });

    it('lists and counts sagas, with the sagas from package.json; --config and --sagas do the same', async () => {
      const active = await json('sagas', 'list', '--status', 'active');
      expect(active.items.map((s: { correlation: string }) => s.correlation)).toEqual(['order-1042', 'order-1041']);
      expect(active.nextCursor).toBeNull();
      const count = await cli('sagas', 'count');
      expect(count.stdout).toMatch(/^TYPE\s+ACTIVE\nscripted\s+2\n$/);
      const elsewhere = await runCliInProcess(
        ['sagas', 'list', '--limit', '1', '--json', ...FIXTURE_FLAGS],
        REPO_ROOT,
        cliDatabaseEnv(db()),
      );
      const page = JSON.parse(elsewhere.stdout);
      expect(page.items).toHaveLength(1);
      expect(page.nextCursor).toEqual(expect.any(String));
      const next = await json('sagas', 'list', '--limit', '1', '--cursor', page.nextCursor);
      expect(next.items[0].correlation).toBe('order-1041');
    });

    it('a built cursor with a valid digest and a created_at in year 10000 exits 2 with CURSOR_INVALID, also with --json', async () => {
      const id = randomUUID();
      const listings: Record<string, (createdAtMs: number) => string[]> = {
        sagas: (createdAtMs) => {
          const cursor = encodeCursor({ createdAtMs, sagaType: 'scripted', id }, { types: ['scripted'], status: 'all' });
          return ['sagas', 'list', '--type', 'scripted', '--cursor', cursor];
        },
        timers: (createdAtMs) => ['timers', 'list', '--cursor', encodeCursor({ createdAtMs, sagaType: '', id }, { table: 'saga_timer' })],
        outbox: (createdAtMs) => ['outbox', 'list', '--cursor', encodeCursor({ createdAtMs, sagaType: '', id }, { table: 'saga_outbox' })],
      };
      for (const [name, argv] of Object.entries(listings)) {
        // The same cursor in year 9999 is taken: its digest is right.
        expect((await cli(...argv(Date.UTC(9999, 0, 1)), '--json')).code, name).toBe(0);
        // Before, PostgreSQL failed the statement (exit 1) and SQLite answered SCHEMA_INVALID (exit 3).
        const run = await cli(...argv(Date.UTC(10_000, 0, 1)), '--json');
        expect(run.code, `${name}: ${run.stderr}`).toBe(2);
        expect(JSON.parse(run.stdout).error.code, name).toBe('CURSOR_INVALID');
      }
    });

    it('shows why a timer died, and refuses to requeue it without --yes', async () => {
      const dead = await cli('timers', 'list', '--status', 'dead_lettered');
      expect(dead.code).toBe(0);
      expect(dead.stdout).toContain('payment service unavailable');
      const [timer] = (await json('timers', 'list', '--status', 'dead_lettered')).items;
      expect(timer).toMatchObject({ name: 'payment-timeout', attempts: 2 });

      expect(await cli('timers', 'requeue', timer.id)).toMatchObject({ code: 2, stderr: expect.stringContaining('--yes') });
      expect((await rows().timers({ id: timer.id }))[0]).toMatchObject({ outcome: 'dead_lettered' });

      const requeued = await cli('timers', 'requeue', timer.id, '--yes');
      expect(requeued).toMatchObject({ code: 0, stdout: expect.stringContaining('1 of 1 changed') });
      expect((await rows().timers({ id: timer.id }))[0]).toMatchObject({ outcome: null, dispatchedAt: null, attempts: 0 });
      const again = await cli('timers', 'requeue', timer.id, '--yes', '--json');
      expect(again.code).toBe(1);
      expect(JSON.parse(again.stdout).items).toEqual([{ id: timer.id, status: 'not_dead_lettered' }]);
    });

    it('reschedules and cancels a pending timer; a bad id is a usage error, a missing one a failure', async () => {
      const saga = await rows().saga('order-1042');
      const [timer] = await rows().pendingTimers(saga!.id);
      const moved = await cli('timers', 'reschedule', timer!.id, '--due', '2026-12-24T08:00:00Z', '--yes');
      expect(moved.code, moved.stderr).toBe(0);
      expect((await rows().timers({ id: timer!.id }))[0]!.dueAt.toISOString()).toBe('2026-12-24T08:00:00.000Z');
      expect((await cli('timers', 'cancel', timer!.id, '--yes')).code).toBe(0);
      expect(await rows().timers({ id: timer!.id })).toEqual([]);
      expect((await cli('timers', 'cancel', timer!.id, '--yes')).code).toBe(1);
      expect(await cli('timers', 'cancel', 'not-a-uuid', '--yes')).toMatchObject({
        code: 2,
        stderr: expect.stringContaining('OPTION_INVALID'),
      });
    });

    it('force-completes and reopens a saga with an audit message; shows it by correlation value', async () => {
      const saga = await rows().saga('order-1041');
      const done = await cli('sagas', 'force-complete', 'scripted', saga!.id, '--reason', 'customer cancelled by phone', '--yes');
      expect(done.code, done.stderr).toBe(0);
      expect((await rows().saga('order-1041'))!.completedAt).not.toBeNull();
      const audit = (await rows().outbox(saga!.id)).filter((row: SagaOutbox) => row.messageType === 'SagaForceCompleted');
      expect(audit).toHaveLength(1);
      expect(await cli('sagas', 'force-complete', 'scripted', saga!.id, '--reason', 'twice', '--yes')).toMatchObject({
        code: 1,
        stderr: expect.stringContaining('SAGA_STATE_CONFLICT'),
      });
      expect((await cli('sagas', 'reopen', 'scripted', saga!.id, '--reason', 'paid after all', '--yes')).code).toBe(0);
      const detail = await json('sagas', 'show', 'scripted', '--correlation', 'order-1041');
      expect(detail).toMatchObject({ id: saga!.id, completedAt: null, state: { key: 'order-1041' } });
      expect(detail.outbox.map((o: { messageType: string }) => o.messageType)).toEqual(
        expect.arrayContaining(['SagaForceCompleted', 'SagaReopened', 'ConfirmOrder']),
      );
      expect((await cli('sagas', 'show', 'scripted', randomUUID())).code).toBe(1);
    });

    it('reads a numeric correlation value as a number for a saga correlated on an integer column', async () => {
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [numberedSaga] });
      const started = await runtime.handle(numberedSaga, { type: 'Touch', number: 42 });
      const sagas = ['--sagas', join(fixtures, 'numbered-saga.ts')];
      const shown = await cli('sagas', 'show', 'numbered', '--correlation', '42', '--json', ...sagas);
      expect(shown.code, shown.stderr).toBe(0);
      expect(JSON.parse(shown.stdout)).toMatchObject({ id: started.sagaId, state: { number: 42 } });
      const listed = await cli('sagas', 'list', '--type', 'numbered', '--correlation', '42', '--json', ...sagas);
      expect(JSON.parse(listed.stdout).items.map((s: { id: string }) => s.id)).toEqual([started.sagaId]);
      const text = await cli('sagas', 'list', '--type', 'numbered', '--correlation', 'forty-two', ...sagas);
      expect(text).toMatchObject({ code: 2, stderr: expect.stringContaining('CORRELATION_INVALID') });
    });

    it('purges dispatched rows and completed sagas and prints the counts', async () => {
      const before = await rows().counts();
      const run = await cli(
        'purge',
        '--dispatched-before',
        '2026-12-01T00:00:00Z',
        '--completed-sagas-before',
        '2026-12-01T00:00:00Z',
        '--yes',
        '--json',
      );
      expect(run.code, run.stderr).toBe(0);
      const report = JSON.parse(run.stdout);
      expect(report.sagas).toEqual({ scripted: 1 }); // order-1040
      expect(report.outbox).toBeGreaterThanOrEqual(2); // the ConfirmOrder rows (order-1040's may go with its saga)
      const after = await rows().counts();
      expect(after.sagas).toBe(before.sagas - 1);
      const left = await rows().outbox();
      expect(left.map((row) => row.messageType).sort()).toEqual(['SagaForceCompleted', 'SagaReopened']); // not yet relayed
    });

    it('verify-schema exits 0 on a migrated database and 3 naming what is missing; a command on a missing table exits 3', async () => {
      expect(await cli('verify-schema')).toMatchObject({ code: 0, stdout: expect.stringContaining('The schema fits') });
      await db().orm.em.getConnection().execute('drop index saga_timer_pending_name_uniq');
      const broken = await cli('verify-schema', '--json');
      expect(broken.code).toBe(3);
      expect(JSON.parse(broken.stdout).problems).toEqual([
        expect.objectContaining({ kind: 'index_missing', table: 'saga_timer', item: 'saga_timer_pending_name_uniq' }),
      ]);
      await db().orm.em.getConnection().execute('alter table saga_outbox rename to saga_outbox_moved');
      const failed = await cli('outbox', 'list');
      expect(failed).toMatchObject({ code: 3, stderr: expect.stringContaining('SCHEMA_INVALID') });
      await db().orm.em.getConnection().execute('alter table saga_outbox_moved rename to saga_outbox');
    });
  });
}
