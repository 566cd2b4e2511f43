-- ARGV: messages
-- A thread between runs gets a new transcript (``update_state``, a saver's state taken
-- in); the runs that handed theirs over keep reading theirs (``set_transcript``).
return set_transcript(cjson.decode(arg.messages))
