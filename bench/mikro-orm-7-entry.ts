/**
 * Run by `npm run bench` on 6 through the v7 leg: measures `BOTH_MAJORS_STEPS` on MikroORM 7, logs its
 * progress to stderr and prints the figures as one JSON array, the last line of stdout.
 *
 *   legs/mikro-orm-7/run node --import tsx bench/mikro-orm-7-entry.ts [--short]
 */
import { BOTH_MAJORS_STEPS, measureSteps, ORM_VERSION } from './both-majors.js';

if (!ORM_VERSION.startsWith('7.')) {
  console.error(`bench/mikro-orm-7-entry.ts loaded MikroORM ${ORM_VERSION}: run it through legs/mikro-orm-7/run`);
  process.exit(1);
}
const { figures } = await measureSteps(BOTH_MAJORS_STEPS, (line) => console.error(`MikroORM ${ORM_VERSION}: ${line}`));
console.info(JSON.stringify(figures));
