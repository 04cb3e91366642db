import type { DatabaseContext } from '../sql/database-context.js';
import { dispatcherChannel, notifyStatement } from '../sql/notification-statements.js';
import { type SqlStatement, sendStatement } from '../sql/sql-executor.js';
import { describeError } from '../telemetry/describe-error.js';
import type { SagaLogger } from '../telemetry/logger.js';

/**
 * Wakes the dispatchers of other processes (PostgreSQL's NOTIFY on the library tables' channel) when a unit of work
 * committed rows due at once; they claim them then rather than at their next poll. Sent after the commit, on the
 * context's autocommit EntityManager: in the unit's transaction, NOTIFY would take a database-wide lock at COMMIT.
 * Coalesced: at most one in flight; commits while it is in flight send one more after it, which covers them all.
 * It never fails or delays the unit: a failed NOTIFY is dropped, and the dispatchers' polls find the rows.
 */
export class DispatcherNotifier {
  private readonly statement: SqlStatement;
  private sending = false;
  private again = false;

  constructor(
    private readonly db: DatabaseContext,
    private readonly logger: SagaLogger,
  ) {
    this.statement = notifyStatement(dispatcherChannel(db));
  }

  /** Rows due at once were committed: wakes the listening dispatchers, now or after the notification in flight. */
  rowsDue(): void {
    if (this.sending) {
      this.again = true;
      return;
    }
    this.sending = true;
    void this.send();
  }

  private async send(): Promise<void> {
    do {
      this.again = false;
      // Nothing is sent on a closed ORM: MikroORM 6's pool would keep the statement waiting, 7 would connect again.
      if (this.db.orm.closed) break;
      try {
        await sendStatement(this.db.autocommit, this.statement);
      } catch (error) {
        // Dropped: the rows are found by the dispatchers' next poll.
        this.logger.debug('NOTIFY failed; dispatchers of other processes find the rows at their next poll', {
          error: describeError(error),
        });
      }
    } while (this.again);
    this.sending = false;
  }
}
