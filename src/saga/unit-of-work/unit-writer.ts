import type { DatabaseContext } from '../../sql/database-context.js';
import type { GroupLimits } from '../runtime-options.js';
import { GroupCommit } from './group-commit.js';
import type { UnitWrite } from './unit-write.js';
import { type WriteReport, writePlan } from './write-plan.js';

/** The write phase of units of work: in the next group commit, or each in a transaction of its own when grouping is off. */
export class UnitWriter {
  private readonly groups: GroupCommit | undefined;

  constructor(
    private readonly context: DatabaseContext,
    groupCommit: GroupLimits | false,
  ) {
    this.groups = groupCommit ? new GroupCommit(context, groupCommit) : undefined;
  }

  /**
   * Writes `unit`: in the next group, or with `alone` (it left a group for a row another transaction held) in a
   * transaction of its own ({@link GroupCommit.writeAlone}). Without group commit, always in its own transaction.
   */
  write(unit: UnitWrite, alone: boolean): Promise<WriteReport> {
    if (!this.groups) return writePlan(this.context, unit.em, unit.plan, unit.target);
    return alone ? this.groups.writeAlone(unit) : this.groups.write(unit);
  }
}
