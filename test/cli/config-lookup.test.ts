// How the CLI finds the app's MikroORM config and which TypeScript loader it registers (docs/operations.md "The
// CLI"): the settings it reads, the paths it tries in order, when TypeScript paths are tried, the loader order.
// No database and no process: the rules alone, and the page that states them.
import { randomUUID } from 'node:crypto';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { allowsTypeScript, configCandidates } from '../../src/cli/config-lookup.js';
import { readOrmCliSettings } from '../../src/cli/orm-cli-settings.js';
import { type CliIo, runCli } from '../../src/cli/run-cli.js';
import { chooseLoader, TYPESCRIPT_LOADERS } from '../../src/cli/typescript-loader.js';
import { FIXTURE_FLAGS, runCliInProcess } from '../support/cli-process.js';
import { REPO_ROOT } from '../support/repository.js';

const app = join(REPO_ROOT, '.tmp', `config-lookup-${randomUUID().slice(0, 8)}`);

async function writeManifest(settings: Record<string, unknown>): Promise<void> {
  await writeFile(join(app, 'package.json'), JSON.stringify({ name: 'lookup-app', type: 'module', 'mikro-orm': settings }));
}

describe('the CLI config lookup', () => {
  beforeAll(() => mkdir(join(app, 'src', 'deep'), { recursive: true }));
  afterAll(() => rm(app, { recursive: true, force: true }));

  it('reads package.json "mikro-orm" from the nearest package.json up from the working directory; variables win', async () => {
    await writeManifest({ configPaths: ['./config/orm.ts'], preferTs: false, tsLoader: 'jiti', tsConfigPath: 'tsconfig.app.json' });
    const fromDeep = readOrmCliSettings(join(app, 'src', 'deep'), {});
    expect(fromDeep).toEqual({
      configFromEnv: undefined,
      configPaths: ['./config/orm.ts'],
      preferTs: false,
      alwaysAllowTs: false,
      tsLoader: 'jiti',
      tsConfigPath: 'tsconfig.app.json',
      dependencies: [],
    });
    const env = { MIKRO_ORM_CLI_PREFER_TS: 'true', MIKRO_ORM_CLI_TS_LOADER: 'auto', MIKRO_ORM_CLI_CONFIG: './orm.ts' };
    expect(readOrmCliSettings(app, env)).toMatchObject({ preferTs: true, tsLoader: undefined, configFromEnv: './orm.ts' });
    // MikroORM 6 names the switch useTsNode; either name turns TypeScript off, on either major.
    await writeManifest({ useTsNode: false });
    expect(readOrmCliSettings(app, {}).preferTs).toBe(false);
    expect(readOrmCliSettings(app, { MIKRO_ORM_CLI_USE_TS_NODE: '1' }).preferTs).toBe(true);
    expect(readOrmCliSettings(app, { MIKRO_ORM_CLI_ALWAYS_ALLOW_TS: 't' }).alwaysAllowTs).toBe(true);
  });

  it("tries MikroORM's CLI paths in its order, TypeScript ones only when TypeScript is allowed", async () => {
    const settings = { ...readOrmCliSettings(app, {}), configFromEnv: './env.config.ts', configPaths: ['./a.config.js', './b.config.ts'] };
    expect(configCandidates(app, settings, true)).toEqual([
      './env.config.ts',
      './a.config.js',
      './b.config.ts',
      './src/mikro-orm.config.ts',
      './mikro-orm.config.ts',
      './src/mikro-orm.config.js',
      './mikro-orm.config.js',
    ]);
    expect(configCandidates(app, settings, false)).toEqual(['./a.config.js', './src/mikro-orm.config.js', './mikro-orm.config.js']);
    await mkdir(join(app, 'build'));
    expect(configCandidates(app, settings, false)).toContain('./build/mikro-orm.config.js');
    await mkdir(join(app, 'dist'));
    expect(configCandidates(app, settings, false)).toContain('./dist/mikro-orm.config.js');
  });

  it('allows TypeScript paths when a loader can load them, TypeScript is not switched off and no saga module is compiled, or when told to', () => {
    const base = readOrmCliSettings(app, {});
    const on = { ...base, preferTs: true };
    const off = { ...base, preferTs: false };
    expect(allowsTypeScript(on, [], () => true)).toBe(true);
    expect(allowsTypeScript(on, ['./src/order-saga.ts'], () => true)).toBe(true);
    expect(allowsTypeScript(on, [], () => false)).toBe(false);
    expect(allowsTypeScript(off, [], () => true)).toBe(false);
    expect(allowsTypeScript({ ...off, alwaysAllowTs: true }, [], () => false)).toBe(true);
    // A compiled saga module needs the compiled config: its entity classes are the ones that config registers.
    expect(allowsTypeScript(on, ['./src/a-saga.ts', './dist/order-saga.js'], () => true)).toBe(false);
    expect(allowsTypeScript({ ...on, alwaysAllowTs: true }, ['./dist/order-saga.js'], () => true)).toBe(false);
    expect(allowsTypeScript({ ...off, configFromEnv: './orm.config.ts' }, ['./dist/order-saga.js'], () => false)).toBe(true);
  });

  it("registers the first loader installed, in MikroORM 7's order then ts-node, or the one named", () => {
    const installed =
      (...modules: string[]) =>
      (module: string) =>
        modules.includes(module) ? `file:///${module}` : undefined;
    const pick = (preferred: string | undefined, ...modules: string[]) => chooseLoader(preferred, installed(...modules))?.loader.name;
    expect(TYPESCRIPT_LOADERS.map((l) => l.name)).toEqual(['oxc', 'swc', 'tsx', 'jiti', 'tsimp', 'ts-node']);
    expect(pick(undefined, 'tsx/esm/api', 'jiti/register', 'ts-node/esm')).toBe('tsx');
    expect(pick(undefined, '@swc-node/register/esm-register', 'tsx/esm/api')).toBe('swc');
    expect(pick(undefined, 'ts-node/esm')).toBe('ts-node');
    expect(pick(undefined)).toBeUndefined();
    expect(pick('jiti', 'tsx/esm/api', 'jiti/register')).toBe('jiti');
    expect(() => pick('jiti', 'tsx/esm/api')).toThrow("The TypeScript loader 'jiti' is not installed: npm i -D jiti.");
    expect(() => pick('esbuild', 'tsx/esm/api')).toThrow("'esbuild' is not one of oxc, swc, tsx, jiti, tsimp, ts-node");
  });

  it('says why a TypeScript config present was not tried (exit 2)', async () => {
    await writeManifest({ preferTs: false });
    await writeFile(join(app, 'src', 'mikro-orm.config.ts'), 'export default {};\n');
    const err: string[] = [];
    const io: CliIo = { cwd: app, stdout: () => {}, stderr: (t) => err.push(t), ask: undefined };
    expect(await runCli(['sagas', 'count'], io)).toBe(2);
    expect(err.join('\n')).toContain(
      './src/mikro-orm.config.ts exists but was not tried: TypeScript is switched off (preferTs / useTsNode false).',
    );
  });

  it('names a TypeScript config and a compiled saga module as the reason a saga entity is not registered (exit 2)', async () => {
    const compiled = join(app, 'compiled-saga.js');
    const source = pathToFileURL(join(REPO_ROOT, 'src', 'index.ts')).href;
    await writeFile(
      compiled,
      `import { defineSaga, SagaState } from '${source}';\nclass CompiledSaga extends SagaState {}\n` +
        "export const compiledSaga = defineSaga({ name: 'compiled', state: CompiledSaga, correlation: { property: 'id', from: () => 'x' }, startedBy: ['Go'], steps: { Go() {} } });\n",
    );
    const env = { SAGA_TEST_DIALECT: 'sqlite', SAGA_TEST_LOCATION: ':memory:' };
    const run = await runCliInProcess(['sagas', 'count', ...FIXTURE_FLAGS.slice(0, 2), '--sagas', compiled], app, env);
    expect(run.code).toBe(2);
    expect(run.stderr).toContain('Saga compiled: entity CompiledSaga is not registered in MikroORM');
    expect(run.stderr).toContain(`cli.config.ts is TypeScript and the saga module ${compiled} is compiled JavaScript`);
  });

  it('is what docs/operations.md states', async () => {
    const doc = await readFile(join(REPO_ROOT, 'docs', 'operations.md'), 'utf8');
    expect(doc).toContain(TYPESCRIPT_LOADERS.map((l) => `\`${l.name}\``).join(', '));
    expect(doc).toContain(
      '`MIKRO_ORM_CLI_CONFIG`, package.json `mikro-orm.configPaths`, `./src/mikro-orm.config.ts` and `./mikro-orm.config.ts`',
    );
  });
});
