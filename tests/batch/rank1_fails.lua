-- rank1_fails.lua - a script that cannot start on MPI rank 1 only
-- (tests/batch/mpi.sh: rank 0 must not wait for it forever)
if os.getenv("OMPI_COMM_WORLD_RANK") == "1" then error("rank 1 cannot start") end
return function(p)
  local t = os.clock()
  while os.clock() - t < 0.01 do end
  return lm.rand({3, 8, 8}, {seed = p.seed})
end
