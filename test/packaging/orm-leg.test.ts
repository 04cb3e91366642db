// The suite runs once per MikroORM major (docs: README "MikroORM 7"). A broken redirect in the v7 leg falls back
// to 6.6.16 silently and every other test would pass on the wrong major: this file is what fails then, in this
// process and in the node processes tests spawn (which load MikroORM through NODE_OPTIONS, not through vitest).
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { Utils } from '@mikro-orm/core';
import { describe, expect, it } from 'vitest';
import { EXPECTED_ORM_MAJOR, LOADED_ORM_MAJOR } from '../support/orm-leg.js';
import { REPO_ROOT } from '../support/repository.js';

const run = promisify(execFile);
/** MikroORM 7 needs Node.js 22.17 or newer (its packages' `engines`). */
const MIN_NODE_FOR_7 = [22, 17] as const;

const nodeAtLeast = (version: string, [major, minor]: readonly [number, number]) => {
  const [m = 0, n = 0] = version.replace(/^v/, '').split('.').map(Number);
  return m > major || (m === major && n >= minor);
};

describe('the MikroORM major of this leg', () => {
  it('is the one MIKRO_ORM_LEG names, in the test process', () => {
    expect([6, 7]).toContain(EXPECTED_ORM_MAJOR);
    expect(LOADED_ORM_MAJOR).toBe(EXPECTED_ORM_MAJOR);
    expect(Utils.getORMVersion()).toMatch(new RegExp(`^${EXPECTED_ORM_MAJOR}\\.`));
  });

  it('is the one MIKRO_ORM_LEG names, in a spawned node process (with tsx, as the suite spawns them)', async () => {
    const script = `import { Utils } from '@mikro-orm/core'; console.log(JSON.stringify({ orm: Utils.getORMVersion(), node: process.version }));`;
    const { stdout } = await run(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { cwd: REPO_ROOT });
    const child = JSON.parse(stdout.trim()) as { orm: string; node: string };
    expect(Number(child.orm.split('.')[0])).toBe(EXPECTED_ORM_MAJOR);
    expect(child.node).toBe(process.version);
    if (EXPECTED_ORM_MAJOR === 7) expect(nodeAtLeast(child.node, MIN_NODE_FOR_7)).toBe(true);
  });
});
