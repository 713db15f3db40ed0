"""The detector over the database (the leader's job): new rows -> rank state -> the pure app.detect ->
incidents, ranks and stack requests written back in one transaction. app.detect is the pure half."""
